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
- A pool with ``pool_dir`` lives in the file ``<pool_dir>/shmkafka.<name>``, and
  /dev/shm/shmkafka.<name> is a symlink to it, so every process finds a pool by its name
  alone. Opening such a pool (``open_in_directory``) holds a ``flock`` on
  ``<pool_dir>/shmkafka.<name>.lock`` while it creates, links or recovers, so one process
  does each. A file with no link (the host restarted: /dev/shm is empty) or a
  ``.recovering`` file beside it (a recovery was cut short) is handed to the caller to
  recover (pool/recovery.py) in a new file.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
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


def link_path(pool: str) -> str:
    """The pool's name in /dev/shm: the segment itself, or a symlink to a pool_dir file."""
    return "/dev/shm/" + PREFIX + pool


def pool_file_in(directory: str, pool: str) -> str:
    return os.path.join(directory, PREFIX + validate_pool_name(pool))


class FileHandle:
    """An open pool file in a directory: posix_ipc.SharedMemory's ``fd`` and ``close_fd``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close_fd(self) -> None:
        os.close(self.fd)


class Segment:
    """A mapped pool segment. ``buf`` is a writable memoryview over the whole mapping."""

    def __init__(self, pool: str, shm: posix_ipc.SharedMemory | FileHandle, layout: Layout) -> None:
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
        _fallocate(self.fd, start, end - start, self.pool, None, self.layout.config.pool_dir)

    # ------------------------------------------------------------------ creation

    @classmethod
    def create(cls, pool: str, config: PoolConfig) -> Segment:
        if config.pool_dir:
            return cls._create_file(pool, config)
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

    @classmethod
    def _create_file(cls, pool: str, config: PoolConfig, path: str | None = None) -> Segment:
        """A new pool file in ``config.pool_dir`` (or at ``path``), not linked yet."""
        path = path or pool_file_in(config.pool_dir, pool)
        layout = Layout.for_config(config)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, layout.size)
            grown_from, grown_to = layout.grown_regions
            for start, end in ((0, grown_from), (grown_to, layout.size)):
                _fallocate(fd, start, end - start, pool, layout.size - grown_to + grown_from,
                           where=config.pool_dir)  # fmt: skip
            segment = cls(pool, FileHandle(fd), layout)
            segment._write_header(config)
            if config.durable:
                segment.sync()  # (the header and config: recovery trusts them)
            return segment
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise

    def sync(self, offset: int = 0, length: int | None = None) -> None:
        """msync(MS_SYNC) of ``[offset, offset + length)`` (whole pages; all by default):
        once it returns, that part of a pool_dir file is on the disk (durability.py)."""
        if length is None:
            self._map.flush()
            return
        start = offset // PAGE * PAGE
        self._map.flush(start, -(-(offset + length - start) // PAGE) * PAGE)

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
            shm: posix_ipc.SharedMemory | FileHandle = (
                _open_linked(pool)  # (shm_open does not follow a pool_dir's symlink)
                if os.path.islink(link_path(pool))
                else posix_ipc.SharedMemory(name)
            )
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
        """Returns the segment and whether this call created it (a pool_dir pool that needs
        recovering is the caller's: ``open_in_directory``)."""
        assert not config.pool_dir, "a pool_dir pool opens through open_in_directory"
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


class DirectoryOpen:
    """``open_in_directory``'s answer: the segment, whether it is new, and, when the pool
    needs recovering, the old file to recover from. ``release`` lets go of the directory
    lock: after the recovery, or at once when there is none."""

    def __init__(self, segment: Segment, created: bool, recover_from: str | None, lock: int):
        self.segment = segment
        self.created = created
        self.recover_from = recover_from
        self._lock = lock

    def release(self) -> None:
        if self._lock >= 0:
            os.close(self._lock)  # (closing drops the flock)
            self._lock = -1


def open_in_directory(pool: str, config: PoolConfig) -> DirectoryOpen:
    """Create, attach or hand over for recovery the pool_dir pool ``pool``, under the
    directory's lock file. The returned ``DirectoryOpen`` still holds that lock when a
    recovery is due; otherwise it has been released."""
    path = pool_file_in(config.pool_dir, pool)
    recovering = path + ".recovering"
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        linked = os.path.islink(link_path(pool)) and os.path.realpath(link_path(pool)) == path
        if linked and not os.path.exists(recovering):
            found = DirectoryOpen(Segment.attach(pool, config), False, None, lock)
            found.release()
            return found
        if os.path.lexists(link_path(pool)):
            _unlink_stale_link(pool, path)
        if os.path.exists(recovering):  # (a recovery was cut short: its new file is void)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        elif os.path.exists(path):
            os.rename(path, recovering)
            _sync_directory(config.pool_dir)
        segment = Segment._create_file(pool, config, path)
        os.symlink(path, link_path(pool))
        if not os.path.exists(recovering):
            made = DirectoryOpen(segment, True, None, lock)
            made.release()
            return made
        return DirectoryOpen(segment, True, recovering, lock)
    except BaseException:
        os.close(lock)
        raise


def _unlink_stale_link(pool: str, path: str) -> None:
    """The name is taken: by a link to our file (a recovery was cut short: redone), or by
    a link whose file is gone (stale); anything else is another pool, and refused."""
    link = link_path(pool)
    target = os.path.realpath(link) if os.path.islink(link) else None
    if target is not None and (target == path or not os.path.exists(target)):
        os.unlink(link)
        return
    where = f"in {os.path.dirname(target)}" if target else "in /dev/shm"
    raise SegmentOwnerError(
        f"pool name {pool!r} is taken by another pool {where}: choose another name"
    )


def finish_recovery(opened: DirectoryOpen, config: PoolConfig) -> None:
    """The recovered pool is on the disk: the old file goes, and the directory lock."""
    assert opened.recover_from is not None
    opened.segment.sync()
    os.fsync(opened.segment.fd)
    os.unlink(opened.recover_from)
    _sync_directory(config.pool_dir)
    opened.release()


def _sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_linked(pool: str) -> FileHandle:
    """Open the pool_dir file that /dev/shm/shmkafka.<pool> links to; the link and the file
    must both be ours (the link sits in a directory everyone writes)."""
    link = link_path(pool)
    try:
        owner = os.lstat(link).st_uid
        if owner != os.getuid():
            raise SegmentOwnerError(f"pool {pool!r}'s link belongs to uid {owner}: refused")
        return FileHandle(os.open(link, os.O_RDWR | os.O_CLOEXEC))
    except FileNotFoundError:
        raise PoolNotFoundError(f"no pool named {pool!r} (its file is gone)") from None
    except PermissionError:
        raise SegmentOwnerError(f"pool {pool!r}'s file is another user's: refused") from None


def _fallocate(
    fd: int, start: int, length: int, pool: str, whole: int | None, where: str = ""
) -> None:
    try:
        faultpoints.check_reserve(length, fixed=whole is not None)
        if where:
            _reserve_blocks(fd, start, length)
        else:
            os.posix_fallocate(fd, start, length)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
            raise
        what = f"{whole} bytes to create it" if whole is not None else f"{length} more bytes"
        place = where or "/dev/shm"
        raise SegmentSpaceError(
            f"{place} is full: pool {pool!r} needs {what} ({exc.strerror}); "
            f"make {place} larger (docs/deployment.md sizes it)"
        ) from None


_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


def _reserve_blocks(fd: int, start: int, length: int) -> None:
    """fallocate(2) for a pool_dir file: disk blocks taken now, so a full disk is a typed
    error, never a SIGBUS. A file system without it (FUSE) gets a sparse file. Not glibc's
    posix_fallocate, whose fallback writes a zero into every block: a race with the other
    processes writing the mapping."""
    if _libc.fallocate(fd, 0, start, length) != 0:
        code = ctypes.get_errno()
        if code != errno.EOPNOTSUPP:
            raise OSError(code, os.strerror(code))


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
    """Remove a pool's segment (a pool_dir pool: its link and its file) and every semaphore
    of it that exists."""
    link = link_path(pool)
    if os.path.islink(link):
        target = os.path.realpath(link)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
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
