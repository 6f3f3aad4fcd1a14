"""The pool segment: one POSIX shared-memory object per pool, ``/shmkafka.<name>``.

Rules (ownership of close and unlink):
- ``Segment.create`` makes the object (O_CREAT|O_EXCL, mode 0600), sizes it for every region,
  reserves the memory of the fixed regions with ``posix_fallocate`` (a full /dev/shm fails
  here, never as a SIGBUS later), writes the header and config, and writes the magic last;
  an attacher waits for the magic.
- The regions that grow (layout.py: ``grown_regions``) are reserved page by page by whoever
  first writes them (``reserve``): a full /dev/shm is then a ``SegmentSpaceError`` for the
  one thing that needed the memory.
- Every process that opens a segment closes its own mapping (``close``); closing never
  removes anything.
- Only ``unlink`` removes the segment and its semaphores. It is called by whoever ends the
  pool: ``SharedPool.destroy`` (tests, the Sender when the last producer detached) or
  ``shmkafka cleanup`` for pools whose processes are all dead. Never by a finalizer.
- A segment owned by another uid is refused.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
import time

import posix_ipc

from shmkafka.shm import faultpoints
from shmkafka.shm.config import PoolConfig, validate_pool_name
from shmkafka.shm.errors import (
    LayoutMismatchError,
    PoolNotFoundError,
    SegmentOwnerError,
    SegmentSpaceError,
)
from shmkafka.shm.layout import (
    CONFIG_SIZE,
    H_PRODUCER_ID,
    HEADER_FIXED,
    HEADER_SIZE,
    LAYOUT_VERSION,
    MAGIC,
    PAGE,
    Layout,
)

PREFIX = "shmkafka."
ATTACH_WAIT_S = 5.0


def segment_name(pool: str) -> str:
    return "/" + PREFIX + validate_pool_name(pool)


def semaphore_name(pool: str, kind: str, index: int) -> str:
    return f"/{PREFIX}{pool}.{kind}{index}"


class Segment:
    """A mapped pool segment. ``buf`` is a writable memoryview over the whole mapping."""

    def __init__(self, pool: str, shm: posix_ipc.SharedMemory, layout: Layout) -> None:
        self.pool = pool
        self.pool_file = PREFIX + pool
        self.layout = layout
        self._shm = shm
        self.fd: int = shm.fd
        self._map = mmap.mmap(shm.fd, layout.size)
        self.buf = memoryview(self._map)
        # The mapping as u32 and u64 words: an item store is one aligned store, which a
        # process killed at any instruction either made or did not. (U64.pack_into is no
        # such store: it zeroes the field, then writes it byte by byte.)
        self.words = self.buf.cast("Q")
        self.halfwords = self.buf.cast("I")

    def store_u32(self, offset: int, value: int) -> None:
        """Write a 4-aligned 32-bit field in one store (negative values as two's complement)."""
        assert offset & 3 == 0, f"unaligned u32 field at {offset}"
        self.halfwords[offset >> 2] = value & 0xFFFFFFFF

    def store_u64(self, offset: int, value: int) -> None:
        """Write an 8-aligned 64-bit field in one store (negative values as two's complement)."""
        assert offset & 7 == 0, f"unaligned u64 field at {offset}"
        self.words[offset >> 3] = value & 0xFFFFFFFFFFFFFFFF

    def reserve(self, offset: int, length: int) -> None:
        """Take the memory of ``[offset, offset + length)`` (whole pages) before its first
        use; a no-op for pages already taken. SegmentSpaceError if /dev/shm is full."""
        start = offset // PAGE * PAGE
        end = -(-(offset + length) // PAGE) * PAGE
        assert 0 <= start < end <= self.layout.size
        _fallocate(self.fd, start, end - start, self.pool, None)

    # ------------------------------------------------------------------ creation

    @classmethod
    def create(cls, pool: str, config: PoolConfig) -> Segment:
        name = segment_name(pool)
        layout = Layout.for_config(config)
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600)
        try:
            os.ftruncate(shm.fd, layout.size)
            grown_from, grown_to = layout.grown_regions
            for start, end in ((0, grown_from), (grown_to, layout.size)):
                _fallocate(shm.fd, start, end - start, pool, layout.size - grown_to + grown_from)
            segment = cls(pool, shm, layout)
            segment._write_header(config)
            return segment
        except BaseException:
            shm.close_fd()
            posix_ipc.unlink_shared_memory(name)
            raise

    def _write_header(self, config: PoolConfig) -> None:
        blob = config.to_json()
        self.buf[HEADER_SIZE : HEADER_SIZE + len(blob)] = blob
        created = int(time.time() * 1000)
        HEADER_FIXED.pack_into(
            self.buf, 0, b"\0" * 8, LAYOUT_VERSION, len(blob), self.layout.size,
            config.fingerprint(), created,
        )  # fmt: skip
        struct.pack_into("<qi", self.buf, H_PRODUCER_ID, -1, -1)  # no producer id yet
        self.buf[0:8] = MAGIC  # publish last: attachers wait for the magic

    @classmethod
    def attach(cls, pool: str, config: PoolConfig | None = None) -> Segment:
        """Attach to an existing segment; with ``config``, it must match the segment's."""
        name = segment_name(pool)
        try:
            shm = posix_ipc.SharedMemory(name)
        except posix_ipc.ExistentialError:
            raise PoolNotFoundError(f"no pool named {pool!r} ({name} does not exist)") from None
        except posix_ipc.PermissionsError:
            owner = _owner_of(name)
            raise SegmentOwnerError(
                f"pool {pool!r} belongs to uid {owner}, not {os.getuid()}: refused "
                "(a pool is private to the user that created it)"
            ) from None
        try:
            st = os.fstat(shm.fd)
            if st.st_uid != os.getuid():
                raise SegmentOwnerError(
                    f"pool {pool!r} belongs to uid {st.st_uid}, not {os.getuid()}: refused"
                )
            stored = _wait_for_header(shm.fd)
            if config is not None and config != stored:
                raise LayoutMismatchError(
                    f"pool {pool!r} was created with other settings", config.differences(stored)
                )
            return cls(pool, shm, Layout.for_config(stored))
        except BaseException:
            shm.close_fd()
            raise

    @classmethod
    def create_or_attach(cls, pool: str, config: PoolConfig) -> tuple[Segment, bool]:
        """Returns the segment and whether this call created it."""
        while True:
            try:
                return cls.create(pool, config), True
            except posix_ipc.ExistentialError:
                pass
            try:
                return cls.attach(pool, config), False
            except PoolNotFoundError:
                continue  # removed between our two calls: try creating again

    # ------------------------------------------------------------------ accessors

    def is_current(self) -> bool:
        """True while the pool's name still refers to this segment (not unlinked/replaced)."""
        try:
            return os.stat(f"/dev/shm/{self.pool_file}").st_ino == os.fstat(self.fd).st_ino
        except FileNotFoundError:
            return False

    def stored_config(self) -> PoolConfig:
        return self.layout.config

    def close(self) -> None:
        """Unmap and close this process's handle; the segment itself stays.

        If views of the mapping are still alive elsewhere (a caller kept a batch's
        memoryview), the mapping stays until the last of them is gone, instead of failing.
        """
        try:
            self.words.release()
            self.halfwords.release()
            self.buf.release()
            self._map.close()
        except BufferError:
            pass
        self._shm.close_fd()

    def unlink(self) -> None:
        unlink_segment(self.pool)


def _fallocate(fd: int, start: int, length: int, pool: str, whole: int | None) -> None:
    try:
        faultpoints.check_reserve(length, fixed=whole is not None)
        os.posix_fallocate(fd, start, length)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
            raise
        what = f"{whole} bytes to create it" if whole is not None else f"{length} more bytes"
        raise SegmentSpaceError(
            f"/dev/shm is full: pool {pool!r} needs {what} ({exc.strerror}); "
            "make /dev/shm larger (docs/deployment.md sizes it)"
        ) from None


def _owner_of(name: str) -> int | str:
    try:
        return os.stat(f"/dev/shm{name}").st_uid
    except OSError:
        return "another user"


def _wait_for_header(fd: int) -> PoolConfig:
    deadline = time.monotonic() + ATTACH_WAIT_S
    while True:
        size = os.fstat(fd).st_size
        if size >= HEADER_SIZE + CONFIG_SIZE:
            with mmap.mmap(fd, HEADER_SIZE + CONFIG_SIZE, access=mmap.ACCESS_READ) as m:
                magic, version, config_len, seg_size, fingerprint, _ = HEADER_FIXED.unpack_from(
                    m, 0
                )
                if magic == MAGIC:
                    if version != LAYOUT_VERSION:
                        raise LayoutMismatchError(
                            "the segment has another layout version",
                            [f"layout_version: segment has {version}, this code {LAYOUT_VERSION}"],
                        )
                    blob = bytes(m[HEADER_SIZE : HEADER_SIZE + config_len])
                    stored = PoolConfig.from_json(blob)
                    if stored.fingerprint() != fingerprint or seg_size != size:
                        raise LayoutMismatchError("the segment header is inconsistent", [])
                    return stored
        if time.monotonic() > deadline:
            raise LayoutMismatchError(
                f"the segment was not initialised within {ATTACH_WAIT_S} s "
                "(its creator probably died; `shmkafka cleanup` removes it)",
                [],
            )
        time.sleep(0.005)


def unlink_segment(pool: str) -> None:
    """Remove a pool's segment and every semaphore of it that exists."""
    with contextlib.suppress(posix_ipc.ExistentialError):
        posix_ipc.unlink_shared_memory(segment_name(pool))
    for entry in list_semaphores(pool):
        with contextlib.suppress(posix_ipc.ExistentialError):
            posix_ipc.unlink_semaphore("/" + entry)


def list_semaphores(pool: str) -> list[str]:
    """Names (without the leading slash) of the pool's semaphores present in /dev/shm."""
    prefix = f"sem.{PREFIX}{pool}."
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return []
    return [n[len("sem.") :] for n in names if n.startswith(prefix)]


def list_pools() -> list[str]:
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return []
    return sorted(n[len(PREFIX) :] for n in names if n.startswith(PREFIX))
