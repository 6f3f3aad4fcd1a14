"""broker_stub's durable log: per partition replica a directory of segments named by base
offset (20 digits) — ``.log`` (the batches as stored), ``.index`` (sparse: relative offset →
file position, one entry per ``index_interval_bytes``) and ``.timeindex`` (max timestamp →
relative offset) — found through an ordered list of base offsets.

Rules:
- Appends go to the active (last) segment; it rolls at ``segment_bytes`` or ``segment_ms``.
- Only whole segments are deleted (retention by time or bytes), never the active one; the
  log start offset moves to the next segment's base.
- Recovery (``open``): leftovers of interrupted operations (``.deleted``, ``.cleaned``,
  ``.swap``) are removed as Kafka does; an index that is missing or does not match its log is
  rebuilt by scanning the log; the last segment is scanned batch by batch and cut at the
  first batch that is torn or fails its CRC.
- Durability is the flusher's (flush.py): this module writes, it never fsyncs on its own.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from shmkafka.protocol.records import _ATTRIBUTES_AT, HEADER_SIZE, decode_batch_header

INDEX_ENTRY = struct.Struct(">II")  # relative offset, position
TIME_ENTRY = struct.Struct(">qI")  # max timestamp, relative offset
LEFTOVERS = (".deleted", ".cleaned", ".swap")


@dataclass(frozen=True)
class StorageConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    retention_bytes: int = -1
    retention_ms: int = -1


@dataclass(frozen=True)
class BatchAt:
    """A batch found in a segment: where it is and what it covers."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    max_timestamp: int


def scan(data: bytes | memoryview, verify: bool = True) -> Iterator[BatchAt]:
    """The valid batches of a log file's bytes, in order; stops at the first torn or
    corrupt one."""
    view = memoryview(data)
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        header = decode_batch_header(view, pos)
        end = pos + header.size
        if header.batch_length < HEADER_SIZE - 12 or end > len(view) or header.magic != 2:
            return
        if verify and crc32c.crc32c(view[pos + _ATTRIBUTES_AT : end]) != header.crc:
            return
        yield BatchAt(pos, header.size, header.base_offset,
                      header.base_offset + header.last_offset_delta,
                      header.partition_leader_epoch, header.max_timestamp)  # fmt: skip
        pos = end


class Segment:
    def __init__(
        self, directory: str, base_offset: int, config: StorageConfig, now_ms: int
    ) -> None:
        self.base_offset = base_offset
        self.config = config
        stem = os.path.join(directory, f"{base_offset:020d}")
        self.log_path, self.index_path, self.time_path = (
            stem + ".log",
            stem + ".index",
            stem + ".timeindex",
        )
        # unbuffered: the flusher thread fsyncs while the loop thread writes
        self.log = open(self.log_path, "a+b", buffering=0)  # noqa: SIM115 - the segment's life
        self.size = self.log.seek(0, os.SEEK_END)
        self.created_ms = now_ms
        self.index: list[tuple[int, int]] = []  # (relative offset, position)
        self.times: list[tuple[int, int]] = []  # (max timestamp, relative offset)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self._since_index = 0

    # ------------------------------------------------------------------ writes

    def append(self, data: bytes, base_offset: int, last_offset: int, max_timestamp: int) -> None:
        position = self.size
        self.log.write(data)
        self.size += len(data)
        if not self.index or self._since_index >= self.config.index_interval_bytes:
            entry = (base_offset - self.base_offset, position)
            self.index.append(entry)
            with open(self.index_path, "ab") as f:
                f.write(INDEX_ENTRY.pack(*entry))
            self._since_index = 0
            if max_timestamp > self.max_timestamp:
                stamp = (max_timestamp, base_offset - self.base_offset)
                self.times.append(stamp)
                with open(self.time_path, "ab") as f:
                    f.write(TIME_ENTRY.pack(*stamp))
        self._since_index += len(data)
        self.max_timestamp = max(self.max_timestamp, max_timestamp)
        self.next_offset = last_offset + 1

    def fsync(self) -> None:
        os.fsync(self.log.fileno())

    def close(self) -> None:
        self.log.close()

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.time_path):
            if os.path.exists(path):
                os.rename(path, path + ".deleted")  # as Kafka: rename, then remove
                os.remove(path + ".deleted")

    # ------------------------------------------------------------------ reads

    def position_for(self, offset: int) -> int:
        """The file position to scan from for ``offset``: the largest index entry at or
        below it (binary search), or the start."""
        at = bisect.bisect_right(self.index, (offset - self.base_offset, 1 << 62)) - 1
        return self.index[at][1] if at >= 0 else 0

    def read(self, offset: int, max_bytes: int, upto: int) -> tuple[bytes, bool]:
        """Whole batches from ``offset`` (below ``upto``), at least one, about
        ``max_bytes``; and whether the read went to this segment's end (only then may a
        read go on in the next segment: else it would skip what is left of this one)."""
        position = self.position_for(offset)
        # (a bounded read: the sparse index puts offset within an interval of position)
        length = max_bytes + self.config.index_interval_bytes + 65536
        while True:
            self.log.seek(position)
            data = self.log.read(min(length, self.size - position))
            out, last, stopped = self._batches_in(data, offset, max_bytes, upto)
            if out or position + len(data) >= self.size:
                break
            length *= 4  # (one batch larger than the window: read more)
        whole = not stopped and last + 1 >= self.next_offset
        return b"".join(out), whole

    @staticmethod
    def _batches_in(data: bytes, offset: int, max_bytes: int,
                    upto: int) -> tuple[list[bytes], int, bool]:  # fmt: skip
        """(batches, the last offset read, whether a limit stopped the read)
        of ``data``, which may end in a partial batch."""
        out: list[bytes] = []
        size, last = 0, -1
        for batch in scan(data, verify=False):
            if batch.base_offset >= upto:
                return out, last, True
            if batch.last_offset < offset:
                last = batch.last_offset
                continue
            if out and size + batch.size > max_bytes:
                return out, last, True
            out.append(data[batch.position : batch.position + batch.size])
            size += batch.size
            last = batch.last_offset
        return out, last, False

    # ------------------------------------------------------------------ recovery

    def recover(self, last: bool) -> list[BatchAt]:
        """Check the segment against its files: rebuild the indexes if they do not match
        the log; cut a torn or corrupt tail (the last segment). Returns its batches."""
        self.log.seek(0)
        data = self.log.read()
        batches = list(scan(data, verify=last))
        end = batches[-1].position + batches[-1].size if batches else 0
        if end < len(data):
            self.log.truncate(end)
            self.size = end
        self._rebuild_indexes(batches)
        if batches:
            self.next_offset = batches[-1].last_offset + 1
            self.max_timestamp = max(b.max_timestamp for b in batches)
        return batches

    def _rebuild_indexes(self, batches: list[BatchAt]) -> None:
        """Load the index files if they match the log, else rebuild them by scanning it."""
        expected: list[tuple[int, int]] = []
        since = self.config.index_interval_bytes
        times: list[tuple[int, int]] = []
        max_ts = -1
        for batch in batches:
            if not expected or since >= self.config.index_interval_bytes:
                expected.append((batch.base_offset - self.base_offset, batch.position))
                since = 0
                if batch.max_timestamp > max_ts:
                    times.append((batch.max_timestamp, batch.base_offset - self.base_offset))
            since += batch.size
            max_ts = max(max_ts, batch.max_timestamp)
        stored = _read_entries(self.index_path, INDEX_ENTRY)
        if stored != expected:  # missing, torn or stale: rebuild from the log
            _write_entries(self.index_path, INDEX_ENTRY, expected)
            _write_entries(self.time_path, TIME_ENTRY, times)
        self.index, self.times = expected, times
        self._since_index = since if batches else 0


def _read_entries(path: str, entry: struct.Struct) -> list[tuple[int, int]] | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if len(data) % entry.size:
        return None
    return [entry.unpack_from(data, i) for i in range(0, len(data), entry.size)]


def _write_entries(path: str, entry: struct.Struct, entries: list[tuple[int, int]]) -> None:
    with open(path + ".swap", "wb") as f:
        f.write(b"".join(entry.pack(*e) for e in entries))
    os.replace(path + ".swap", path)


class DiskLog:
    """The segments of one partition replica, ordered by base offset."""

    def __init__(self, directory: str, config: StorageConfig, now_ms: int) -> None:
        self.directory = directory
        self.config = config
        os.makedirs(directory, exist_ok=True)
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._unsynced: set[Segment] = set()
        self._hw_path = os.path.join(directory, "high-watermark")
        self.hw = 0  # set by the partition log; checkpointed at each fsync
        self._open(now_ms)

    def _open(self, now_ms: int) -> None:
        names = sorted(os.listdir(self.directory))
        for name in names:
            if name.endswith(LEFTOVERS):
                os.remove(os.path.join(self.directory, name))
        bases = sorted(int(n[:20]) for n in names if n.endswith(".log") and n[:20].isdigit())
        for i, base in enumerate(bases):
            segment = Segment(self.directory, base, self.config, now_ms)
            segment.recover(last=i == len(bases) - 1)
            self._add(segment)
        if not self.segments:
            self._add(Segment(self.directory, 0, self.config, now_ms))

    def _add(self, segment: Segment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_start(self) -> int:
        return self.segments[0].base_offset

    @property
    def leo(self) -> int:
        return self.active.next_offset

    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def append(
        self, data: bytes, base_offset: int, last_offset: int, max_ts: int, now_ms: int
    ) -> None:
        active = self.active
        too_big = active.size + len(data) > self.config.segment_bytes
        too_old = now_ms - active.created_ms >= self.config.segment_ms
        if active.size and (too_big or too_old):
            active = Segment(self.directory, base_offset, self.config, now_ms)
            self._add(active)
        active.append(data, base_offset, last_offset, max_ts)
        self._unsynced.add(active)

    def read(self, offset: int, max_bytes: int, upto: int) -> bytes:
        """Whole batches from ``offset`` (below ``upto``), through the segment list and the
        segment's sparse index; at least one batch, about ``max_bytes``."""
        at = max(0, bisect.bisect_right(self._bases, offset) - 1)
        out = b""
        for segment in self.segments[at:]:
            if segment.base_offset >= upto:
                break
            data, whole = segment.read(offset, max_bytes - len(out), upto)
            out += data
            if not whole or len(out) >= max_bytes:
                break
        return out

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (used by leader-epoch truncation)."""
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            self.segments.pop().delete()
            self._bases.pop()
        segment = self.active
        segment.log.seek(0)
        kept = [b for b in scan(segment.log.read(), verify=False) if b.base_offset < offset]
        end = kept[-1].position + kept[-1].size if kept else 0
        segment.log.truncate(end)
        segment.size = end
        segment.next_offset = kept[-1].last_offset + 1 if kept else segment.base_offset
        segment._rebuild_indexes(kept)

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole old segments past ``retention_ms`` / ``retention_bytes`` (never the
        active one); returns the new log start offset."""
        config = self.config
        while len(self.segments) > 1:
            oldest = self.segments[0]
            expired = (
                config.retention_ms >= 0 and now_ms - oldest.max_timestamp > config.retention_ms
            )
            too_big = (
                config.retention_bytes >= 0 and self.size() - oldest.size >= config.retention_bytes
            )
            if not (expired or too_big):
                break
            self.segments.pop(0).delete()
            self._bases.pop(0)
        return self.log_start

    def fsync(self) -> None:
        """Make every write so far durable, then checkpoint the high watermark."""
        unsynced, self._unsynced = self._unsynced, set()
        for segment in unsynced:
            if not segment.log.closed:
                segment.fsync()
        with open(self._hw_path + ".swap", "w") as f:
            f.write(str(self.hw))
        os.replace(self._hw_path + ".swap", self._hw_path)

    def checkpointed_hw(self) -> int:
        try:
            with open(self._hw_path) as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
