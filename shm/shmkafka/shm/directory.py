"""The topic directory: topic → partitions → (deque id, leader, leader epoch), append-only.

Rules:
- One writer at a time (the Sender; tests), under the directory lock. Entries are appended,
  never moved: a topic's name is written once, before ``topic_count`` makes it visible; its
  partitions are a range of PARTITIONS entries whose deque ids are written before the
  topic's shape word (count | first << 32) covers them; a topic that grows gets a new
  range, and its shape is replaced in one store. Leaders change in place, one u64 store each.
  After each change the writer bumps ``directory_version`` (stored last).
- Readers never lock, and every read is consistent without a retry: a shape read in one
  load names entries that were whole before it was stored, and deque ids never change.
  Each process caches the topic names it has read (the list only grows) and, per version,
  the partitions of the topics it asked for: a ``send()`` costs one 8-byte read while the
  directory is unchanged, and a new version costs a process only the topics it uses.
- A (topic, partition) keeps its deque id while the topic is live (its deque may hold
  batches), so a publish that leaves out a known topic or partition carries it forward.
- An idle topic is retired (``retire``, the Sender): holding the stripe locks of its deques,
  which must be empty with no batch in flight, the writer saves each partition's sequence in
  its entry, marks the shape RETIRED, and bumps the version before it lets go; appenders
  check the version under the stripe lock, so none writes into a deque given back. Its
  deques are reused by the next partitions added; the topic keeps its index and range, and
  comes back with its sequences when an app asks for it again. ``recover`` (a new writer)
  revives a retired topic whose deques still hold batches (a writer killed between the
  shape and the version) and rebuilds the list of free deques.
- When names or ranges run out while topics are retired, the writer forgets every retired
  topic (``forget_retired``: a RETIRED shape of no partitions); their entries and ranges
  are reused, and the Sender takes a new producer id before it sends again (a forgotten
  topic's sequences are gone: under a new id every partition starts at 0). A forgotten
  entry's name is rewritten between two moves of ``names_epoch`` (odd meanwhile): a reader
  whose epoch moved reads every name again.
- A topic that does not fit (max_topics, max_partitions, a full /dev/shm) is refused, not
  raised: ``publish`` returns it and the writer records it in REFUSALS, so the apps waiting
  for it fail at once with the limit named, and every other topic keeps flowing.
- Nothing reads an entry no count has published: the regions are reserved page by page as
  they fill (layout.py, Reservation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from shmkafka.shm import faultpoints
from shmkafka.shm.config import MAX_TOPIC_NAME
from shmkafka.shm.directory_view import (
    DirectorySnapshot,
    PartitionEntry,
    PartitionLeader,
    Topics,
)
from shmkafka.shm.errors import CapacityError, SegmentSpaceError, ShmConfigError
from shmkafka.shm.layout import (
    D_NEXT_SEQUENCE,
    D_PARTITION,
    D_TOPIC,
    DEQUE_HEADER,
    DEQUE_SIZE,
    EMPTY_ENDS,
    H_DEQUES_USED,
    H_DIRECTORY_VERSION,
    H_NAMES_EPOCH,
    H_PARTITION_ENTRIES,
    H_TOPIC_COUNT,
    H_TOPIC_REQUESTS,
    I32,
    P_DEQUE,
    P_LEADER,
    PARTITION_ENTRY_SIZE,
    REFUSED_MEMORY,
    REFUSED_PARTITIONS,
    REFUSED_TOPICS,
    RETIRED,
    TOPIC_NAME,
    TOPIC_REQUEST,
    TOPIC_REQUEST_SLOTS,
    TOPIC_SHAPE,
    U32,
    U64,
    Layout,
)
from shmkafka.shm.refusals import Refusal, find_refusal, record_refusal, refusal_count
from shmkafka.shm.segment import Segment

LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names (use fullmatch)


def _shape(word: int) -> tuple[int, int]:
    return word & 0xFFFFFFFF, word >> 32


def _leader_word(leader: PartitionLeader) -> int:
    return (leader.leader & 0xFFFFFFFF) | (leader.leader_epoch & 0xFFFFFFFF) << 32


class Directory:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout
        self._names: list[str] = []  # topic index → name, as far as this process has read
        self._index: dict[str, int] = {}
        self._cached = DirectorySnapshot(-1, {})
        self._owners_map: dict[int, tuple[str, int]] = {}
        self._owners_version = -1
        self._names_epoch = 0
        self._free: list[int] | None = None  # the writer's deques given back (found lazily)
        self._free_ranges: list[tuple[int, int]] | None = None  # (first, count), forgotten
        self._free_indices: list[int] | None = None  # forgotten topics' entries
        self.forgot = False  # the writer forgot retired topics' sequences (the Sender resets)

    def version(self) -> int:
        version: int = U64.unpack_from(self.segment.buf, H_DIRECTORY_VERSION)[0]
        return version

    def snapshot(self) -> DirectorySnapshot:
        """The current directory (cached until the version word moves)."""
        cached = self._cached
        version = U64.unpack_from(self.segment.buf, H_DIRECTORY_VERSION)[0]
        if version == cached.version:
            return cached
        epoch = self.segment.words[H_NAMES_EPOCH >> 3]
        if epoch != self._names_epoch:  # (an entry was given another name: read them all)
            self._names.clear()
            self._index.clear()
        self._read_names()
        self._names_epoch = epoch if self.segment.words[H_NAMES_EPOCH >> 3] == epoch else -1
        if epoch & 1:
            self._names_epoch = -1  # (a rewrite was under way: read them again next time)
        self._cached = DirectorySnapshot(version, Topics(self, version, self._names))
        return self._cached

    def partitions(self, topic: str) -> tuple[PartitionEntry, ...] | None:
        return self.snapshot().topics.get(topic)

    def topic_count(self) -> int:
        count: int = self.segment.halfwords[H_TOPIC_COUNT >> 2]  # (one load)
        return min(count, self.layout.config.max_topics)  # (damage bounded)

    def _read_names(self) -> None:
        """Parse the topics added since this process last looked (entries never move)."""
        buf, names = self.segment.buf, self._names
        for index in range(len(names), self.topic_count()):
            length, raw = TOPIC_NAME.unpack_from(buf, self.layout.topic_at(index))
            name = raw[: min(length, MAX_TOPIC_NAME)].decode("utf-8", "replace")
            self._index.setdefault(name, index)
            names.append(name)

    def index_of(self, topic: str) -> int | None:
        index = self._index.get(topic)
        if index is None and len(self._names) < self.topic_count():
            self._read_names()
            index = self._index.get(topic)
        return index

    def owner(self, deque_id: int) -> tuple[str, int] | None:
        """The (topic, partition) a deque belongs to, or None for a deque no published
        topic owns. Its header says (written once, with the deque); the directory's entry
        confirms it, and is searched instead when app memory damage changed the header."""
        at = self.layout.deque_at(deque_id)
        index: int = U32.unpack_from(self.segment.buf, at + D_TOPIC)[0]
        partition: int = U32.unpack_from(self.segment.buf, at + D_PARTITION)[0]
        snapshot = self.snapshot()
        if index < len(self._names):
            topic = self._names[index]
            entries = snapshot.topics.get(topic)
            if entries and partition < len(entries) and entries[partition].deque_id == deque_id:
                return topic, partition
        return self._owners(snapshot).get(deque_id)

    def _owners(self, snapshot: DirectorySnapshot) -> dict[int, tuple[str, int]]:
        if self._owners_version != snapshot.version:
            self._owners_map = snapshot.by_deque()
            self._owners_version = snapshot.version
        return self._owners_map

    def is_live(self, index: int) -> bool:
        """A published topic that is not retired."""
        return not self._shape_of(index)[0] & RETIRED

    def _shape_of(self, index: int) -> tuple[int, int]:
        return _shape(self.segment.words[(self.layout.topic_at(index) + TOPIC_SHAPE) >> 3])

    def read_partitions(self, index: int) -> tuple[PartitionEntry, ...] | None:
        """A topic's partitions (None: it is retired). Read without locks."""
        # (u64 words are read as one load each: struct.unpack_from copies byte by byte)
        words, layout = self.segment.words, self.layout
        count, first = self._shape_of(index)
        if count & RETIRED:
            return None
        if first + count > layout.partition_capacity:
            return ()  # memory damage: a topic with no partitions is never sent to
        used = self.segment.halfwords[H_DEQUES_USED >> 2]
        out = []
        at = layout.partition_entry_at(first) >> 3
        for p in range(count):
            word = words[at + 2 * p + 1]  # P_LEADER
            leader, epoch = word & 0xFFFFFFFF, word >> 32
            deque_id = words[at + 2 * p] & 0xFFFFFFFF  # P_DEQUE
            if deque_id >= used:
                return ()  # memory damage: never a deque past the published ones
            out.append(
                PartitionEntry(deque_id, leader - (leader >> 31 << 32), epoch - (epoch >> 31 << 32))
            )
        return tuple(out)

    # ------------------------------------------------------------------ the writer

    def publish(self, topics: Mapping[str, Sequence[PartitionLeader]]) -> dict[str, Refusal]:
        """Add or update ``topics`` (known topics and partitions left out are carried
        forward); returns the topics refused, each with its limit (nothing is raised for
        them: the others are published). The caller holds the directory lock."""
        refused: dict[str, Refusal] = {}
        for name, leaders in topics.items():
            encoded = name.encode("utf-8")
            if not encoded or len(encoded) > MAX_TOPIC_NAME:
                raise ShmConfigError(f"invalid topic name {name!r}")
            index = self.index_of(name)
            try:
                if index is None:
                    self._add_topic(encoded, leaders)
                else:
                    self._update_topic(index, leaders)
            except _Refused as refusal:
                refused[name] = Refusal(name, refusal.limit, len(leaders))
        self.segment.store_u64(H_DIRECTORY_VERSION, self.version() + 1)  # publish last
        return refused

    def _add_topic(self, encoded: bytes, leaders: Sequence[PartitionLeader]) -> None:
        index = self.topic_count()
        if index >= self.layout.config.max_topics:
            self._reuse_entry(encoded, leaders)
            return
        at = self.layout.topic_at(index)
        self._reserve(at, TOPIC_SHAPE + 8)
        first = self._new_partitions((), leaders, index)
        faultpoints.reached("directory.after_partitions")
        TOPIC_NAME.pack_into(self.segment.buf, at, len(encoded), encoded)
        self.segment.store_u64(at + TOPIC_SHAPE, len(leaders) | first << 32)
        faultpoints.reached("directory.before_count")
        self.segment.store_u32(H_TOPIC_COUNT, index + 1)  # publish last

    def _reuse_entry(self, encoded: bytes, leaders: Sequence[PartitionLeader]) -> None:
        """A new topic when every entry is taken: a forgotten topic's entry (module rules)."""
        free = self._forgotten_indices()
        if not free and self._forget_for_room():
            free = self._forgotten_indices()
        if not free:
            raise _Refused(REFUSED_TOPICS)
        index = free[-1]
        first = self._new_partitions((), leaders, index)  # (may forget more: a new list)
        self._forgotten_indices().remove(index)
        at, epoch = self.layout.topic_at(index), self.segment.words[H_NAMES_EPOCH >> 3]
        self.segment.store_u64(H_NAMES_EPOCH, epoch | 1)  # (odd: a name is rewritten)
        TOPIC_NAME.pack_into(self.segment.buf, at, len(encoded), encoded)
        self.segment.store_u64(at + TOPIC_SHAPE, len(leaders) | first << 32)
        self.segment.store_u64(H_NAMES_EPOCH, (epoch | 1) + 1)
        old = self._names[index] if index < len(self._names) else None
        if old is not None and self._index.get(old) == index:
            del self._index[old]
        if index < len(self._names):
            self._names[index] = encoded.decode("utf-8", "replace")
            self._index[self._names[index]] = index

    def _update_topic(self, index: int, leaders: Sequence[PartitionLeader]) -> None:
        shape_at = self.layout.topic_at(index) + TOPIC_SHAPE
        count, first = _shape(self.segment.words[shape_at >> 3])
        if count & RETIRED:
            self._revive(index, count & ~RETIRED, first, leaders)
            return
        if len(leaders) > count:  # the topic grew: a new range, then the shape in one store
            existing = [e.deque_id for e in self.read_partitions(index) or ()]
            try:
                first = self._new_partitions(existing, leaders, index)
            except _Refused:  # (its partitions so far keep their leaders current)
                self._store_leaders(first, leaders[:count])
                raise
            self.segment.store_u64(shape_at, len(leaders) | first << 32)
            self._free_ranges = None  # (its old range is free once no shape names it)
            return
        self._store_leaders(first, leaders)

    def _store_leaders(self, first: int, leaders: Sequence[PartitionLeader]) -> None:
        buf, layout = self.segment.buf, self.layout
        for p, leader in enumerate(leaders):
            at = layout.partition_entry_at(first + p) + P_LEADER
            word = _leader_word(leader)
            if U64.unpack_from(buf, at)[0] != word:
                self.segment.store_u64(at, word)

    def _new_partitions(
        self, existing: Sequence[int], leaders: Sequence[PartitionLeader], topic_index: int,
        sequences: Sequence[int] = (),
    ) -> int:  # fmt: skip
        """Write a PARTITIONS range for ``leaders`` (the first ``existing`` keep their deque
        ids, the rest get deques given back or new ones, from ``sequences``); returns where
        it starts."""
        layout = self.layout
        fresh = self._take_deques(len(leaders) - len(existing))
        try:
            first = self._take_range(len(leaders))
        except _Refused:
            self._free_deques().extend(reversed([d for d in fresh if d < self._deques_used()]))
            raise
        for p, leader in enumerate(leaders):
            if p < len(existing):
                deque_id = existing[p]
            else:
                deque_id = fresh[p - len(existing)]
                self._give_deque(
                    deque_id, topic_index, p, sequences[p] if p < len(sequences) else 0
                )
            at = layout.partition_entry_at(first + p)
            self.segment.store_u64(at + P_DEQUE, deque_id)
            self.segment.store_u64(at + P_LEADER, _leader_word(leader))
        return first

    def _deques_used(self) -> int:
        used: int = U32.unpack_from(self.segment.buf, H_DEQUES_USED)[0]
        return used

    def _take_range(self, count: int) -> int:
        """Where ``count`` new PARTITIONS entries go: a forgotten range (first fit), else
        past the used ones; when neither has room, retired topics are forgotten first."""
        for attempt in range(2):
            ranges = self._forgotten_ranges()
            for i, (first, length) in enumerate(ranges):
                if length >= count:
                    ranges[i : i + 1] = [(first + count, length - count)] if length > count else []
                    return first
            end: int = U32.unpack_from(self.segment.buf, H_PARTITION_ENTRIES)[0]
            if end + count <= self.layout.partition_capacity:
                entries_at = self.layout.partition_entry_at(end)
                self._reserve(entries_at, count * PARTITION_ENTRY_SIZE)
                self.segment.store_u32(H_PARTITION_ENTRIES, end + count)
                return end
            if attempt or not self._forget_for_room():
                break
        raise _Refused(REFUSED_PARTITIONS)

    def _take_deques(self, count: int) -> list[int]:
        """``count`` deques for new partitions: given-back ones first, then new ones (their
        memory reserved); refused when the pool has no room for them."""
        free, layout = self._free_deques(), self.layout
        used: int = U32.unpack_from(self.segment.buf, H_DEQUES_USED)[0]
        added = max(0, count - len(free))
        if used + added > layout.config.max_partitions:
            raise _Refused(REFUSED_PARTITIONS)
        if added:
            self._reserve(layout.deque_at(used), added * DEQUE_SIZE)
            self._reserve(layout.active_byte_at(used), added)
        taken = [free.pop() for _ in range(count - added)]
        taken += range(used, used + added)
        if added:
            self.segment.store_u32(H_DEQUES_USED, used + added)
        return taken

    def _give_deque(self, deque_id: int, topic_index: int, partition: int, sequence: int) -> None:
        """Make a free (empty) deque partition ``partition``'s, before an entry names it."""
        DEQUE_HEADER.pack_into(
            self.segment.buf, self.layout.deque_at(deque_id),
            EMPTY_ENDS, topic_index, 0, partition, 0, sequence, 0,
        )  # fmt: skip

    # ------------------------------------------------------------------ retiring

    def retire(self, topic: str, busy: frozenset[int] = frozenset()) -> bool:
        """Give an idle topic's deques back (module rules). The caller holds the directory
        lock and the stripe locks of the topic's deques; False (nothing changed) if one
        holds a batch or is in ``busy`` (deques of batches in flight)."""
        index = self.index_of(topic)
        entries = self.read_partitions(index) if index is not None else None
        if index is None or not entries:
            return False
        buf, words, layout = self.segment.buf, self.segment.words, self.layout
        for entry in entries:
            if entry.deque_id in busy or words[layout.deque_at(entry.deque_id) >> 3] != EMPTY_ENDS:
                return False
        count, first = self._shape_of(index)
        for p, entry in enumerate(entries):
            at = layout.deque_at(entry.deque_id)
            sequence: int = I32.unpack_from(buf, at + D_NEXT_SEQUENCE)[0]
            word = entry.deque_id | (max(sequence, 0) + 1) << 32
            self.segment.store_u64(layout.partition_entry_at(first + p) + P_DEQUE, word)
            buf[layout.active_byte_at(entry.deque_id)] = 0
        shape = (count | RETIRED) | first << 32
        faultpoints.reached("directory.retiring")
        self.segment.store_u64(layout.topic_at(index) + TOPIC_SHAPE, shape)
        faultpoints.reached("directory.retired")
        self.segment.store_u64(H_DIRECTORY_VERSION, self.version() + 1)
        self._free_deques().extend(e.deque_id for e in reversed(entries))
        return True

    def _saved_sequences(self, first: int, count: int) -> list[int]:
        words, layout = self.segment.words, self.layout
        return [
            max(0, (words[(layout.partition_entry_at(first + p) + P_DEQUE) >> 3] >> 32) - 1)
            for p in range(count)
        ]

    def _revive(
        self, index: int, count: int, first: int, leaders: Sequence[PartitionLeader]
    ) -> None:
        """A retired topic asked for again: deques for its partitions, from the sequences
        its entries saved; in its old range unless it grew."""
        sequences = self._saved_sequences(first, count)
        if len(leaders) > count:
            first = self._new_partitions((), leaders, index, sequences)
        else:
            layout = self.layout
            fresh = self._take_deques(len(leaders))
            for p, (deque_id, leader) in enumerate(zip(fresh, leaders, strict=True)):
                self._give_deque(deque_id, index, p, sequences[p])
                at = layout.partition_entry_at(first + p)
                self.segment.store_u64(at + P_DEQUE, deque_id)
                self.segment.store_u64(at + P_LEADER, _leader_word(leader))
        shape = len(leaders) | first << 32
        self.segment.store_u64(self.layout.topic_at(index) + TOPIC_SHAPE, shape)

    # ------------------------------------------------------------------ forgetting

    def forget_retired(self) -> int:
        """Forget every retired topic's partitions and sequences (under the directory lock;
        the caller gets a new producer id before it sends again, see the rules): their
        entries and ranges become free. Returns how many were forgotten."""
        forgotten = 0
        for index in range(self.topic_count()):
            count, _ = self._shape_of(index)
            if count & RETIRED and count != RETIRED:
                self.segment.store_u64(self.layout.topic_at(index) + TOPIC_SHAPE, RETIRED)
                forgotten += 1
        if forgotten:
            self._free_ranges = self._free_indices = None
            self.segment.store_u64(H_DIRECTORY_VERSION, self.version() + 1)
        return forgotten

    def _forget_for_room(self) -> bool:
        if self.forget_retired():
            self.forgot = True
            return True
        return False

    def _forgotten_indices(self) -> list[int]:
        if self._free_indices is None:
            self._free_indices = [
                i for i in range(self.topic_count() - 1, -1, -1) if self._shape_of(i)[0] == RETIRED
            ]
        return self._free_indices

    def _forgotten_ranges(self) -> list[tuple[int, int]]:
        """The gaps between the ranges topics hold (live or retired), below the end."""
        if self._free_ranges is None:
            held = sorted(
                (first, count & ~RETIRED)
                for first, count in (self._shape_of(i)[::-1] for i in range(self.topic_count()))
                if count & ~RETIRED
            )
            end: int = U32.unpack_from(self.segment.buf, H_PARTITION_ENTRIES)[0]
            gaps, at = [], 0
            for first, count in [*held, (end, 0)]:
                if first > at:
                    gaps.append((at, first - at))
                at = max(at, first + count)
            self._free_ranges = gaps
        return self._free_ranges

    def _free_deques(self) -> list[int]:
        if self._free is None:
            owned = self._owned_deques()
            used: int = U32.unpack_from(self.segment.buf, H_DEQUES_USED)[0]
            self._free = [d for d in range(used - 1, -1, -1) if d not in owned]  # lowest last
        return self._free

    def _owned_deques(self) -> set[int]:
        return {e.deque_id for entries in self.snapshot().topics.values() for e in entries}

    def free_deques(self) -> int:
        """How many deques were given back and wait for a partition (the writer's view)."""
        return len(self._free_deques())

    def recover(self) -> list[str]:
        """A new writer's start, under the directory lock: revive each retired topic whose
        deques still hold batches, unless a live topic owns one of them (a writer killed
        between the shape and the version), then bump the version; returns the revived."""
        self._read_names()
        owned, words, layout, revived = self._owned_deques(), self.segment.words, self.layout, []
        for index in range(self.topic_count()):
            count, first = self._shape_of(index)
            count &= ~RETIRED
            if count == self._shape_of(index)[0] or first + count > layout.partition_capacity:
                continue  # (live, or damaged)
            ids = [
                words[(layout.partition_entry_at(first + p) + P_DEQUE) >> 3] & 0xFFFFFFFF
                for p in range(count)
            ]
            if owned.intersection(ids):
                continue
            if any(words[layout.deque_at(d) >> 3] != EMPTY_ENDS for d in ids):
                self.segment.store_u64(layout.topic_at(index) + TOPIC_SHAPE, count | first << 32)
                owned.update(ids)
                revived.append(self._names[index])
        self.segment.store_u64(H_DIRECTORY_VERSION, self.version() + 1)
        self._free = None
        return revived

    def _reserve(self, offset: int, length: int) -> None:
        try:
            self.segment.reserve(offset, length)
        except SegmentSpaceError:
            raise _Refused(REFUSED_MEMORY) from None

    # ------------------------------------------------------------------ refusals

    def record_refusal(self, refusal: Refusal) -> None:
        """The writer's side: make a refusal visible to the apps. Under the directory lock."""
        record_refusal(self.segment, refusal)

    def refusals(self) -> int:
        """How many refusals were ever recorded (a process compares it with the last it saw)."""
        return refusal_count(self.segment)

    def refusal(self, topic: str, after: int = 0) -> Refusal | None:
        return find_refusal(self.segment, topic, after)

    # ------------------------------------------------------------------ topic requests

    def request_topic(self, topic: str) -> bool:
        """Ask the Sender to look a topic up (False: the requests are full; ask again once
        the Sender took them). The caller holds the directory lock. A new topic when the
        directory holds max_topics already is a CapacityError at once."""
        encoded = topic.encode("utf-8")
        if not encoded or len(encoded) > MAX_TOPIC_NAME:
            raise ShmConfigError(f"invalid topic name {topic!r}")
        max_topics = self.layout.config.max_topics
        if (
            self.index_of(topic) is None
            and self.topic_count() >= max_topics
            and not any(self._shape_of(i)[0] & RETIRED for i in range(max_topics))
        ):
            raise CapacityError(Refusal(topic, REFUSED_TOPICS, 0).message())
        if topic in self.requested_topics():
            return True
        buf = self.segment.buf
        count: int = U32.unpack_from(buf, H_TOPIC_REQUESTS)[0]
        if count >= TOPIC_REQUEST_SLOTS:
            return False
        TOPIC_REQUEST.pack_into(
            buf, self.layout.topic_requests_at + count * TOPIC_REQUEST.size, len(encoded), encoded
        )
        faultpoints.reached("topic.before_request_count")
        self.segment.store_u32(H_TOPIC_REQUESTS, count + 1)
        return True

    def requested_topics(self) -> list[str]:
        buf = self.segment.buf
        count = min(U32.unpack_from(buf, H_TOPIC_REQUESTS)[0], TOPIC_REQUEST_SLOTS)
        out = []
        for i in range(count):
            length, raw = TOPIC_REQUEST.unpack_from(
                buf, self.layout.topic_requests_at + i * TOPIC_REQUEST.size
            )
            out.append(raw[:length].decode("utf-8", "replace"))
        return out

    def take_topic_requests(self) -> list[str]:
        """The Sender's side: read and clear the requests. The caller holds the lock."""
        topics = [t for t in self.requested_topics() if LEGAL_TOPIC.fullmatch(t)]
        self.segment.store_u32(H_TOPIC_REQUESTS, 0)
        return topics  # (producers check names before asking: others are memory damage)


class _Refused(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit
