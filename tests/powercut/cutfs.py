"""cutfs: a FUSE file system that loses what was not flushed, for power-cut tests.

Every write (a ``write`` call, or the kernel writing back a page of a shared mapping) lands in
the file's current image and marks its pages dirty. ``fsync`` (``msync(MS_SYNC)`` ends in one)
makes the file's dirty pages and its size durable: they are copied into the durable image,
kept in a backing directory on the real disk. Nothing else is: a file that was never synced
does not survive a cut.

A cut (the control socket's ``cut``) keeps a random share of the dirty pages (a disk writes
back some pages before the lights go out: ``keep`` is that share, 0 for LazyFS's clear-cache),
drops the rest, and answers every later request with EIO. The harness then kills the
processes of the host, aborts the FUSE connection (the kernel drops its page cache of the
mount, as a power cut does) and mounts a new cutfs on the durable images: the host after the
reboot.

Run: ``python -m tests.powercut.cutfs MOUNTPOINT BACKING CONTROL_SOCKET``; it prints "ready"
once mounted. Control commands, one line each, answered with one line:
``cut KEEP SEED`` -> ``cut PAGES_KEPT PAGES_DROPPED AT SYNCED...``: AT the wall time of
the cut, SYNCED the wall times at which the last fsyncs of a file finished (at most
``SYNC_TIMES``, oldest first); ``stats`` -> ``fsyncs N``.
``CUTFS_FSYNC_DELAY_MS`` makes every fsync that long (the pages it covers arrive first, so a
cut meanwhile keeps some of them: a torn commit).
Metadata rules: creating a file and changing its size become durable with its next fsync;
unlink is durable at once.
"""

from __future__ import annotations

import errno
import os
import random
import stat
import sys
import time
from dataclasses import dataclass, field

import pyfuse3
import trio

PAGE = 4096
SYNC_TIMES = 4  # fsync completion times a cut reports


@dataclass
class File:
    """A file as pages (absent pages read as zeros: pool files are mostly holes)."""

    inode: int
    name: bytes
    pages: dict[int, bytes] = field(default_factory=dict)
    size: int = 0
    durable: dict[int, bytes] | None = None  # None: never synced (lost by a cut)
    durable_size: int = 0
    dirty: set[int] = field(default_factory=set)
    mode: int = stat.S_IFREG | 0o600
    uid: int = 0
    gid: int = 0
    mtime_ns: int = 0
    linked: bool = True

    def read(self, offset: int, length: int) -> bytes:
        end = min(offset + length, self.size)
        out = bytearray()
        at = offset
        while at < end:
            page, within = divmod(at, PAGE)
            take = min(PAGE - within, end - at)
            data = self.pages.get(page)
            out += data[within : within + take] if data is not None else bytes(take)
            at += take
        return bytes(out)

    def write(self, offset: int, buf: bytes) -> None:
        at, done = offset, 0
        while done < len(buf):
            page, within = divmod(at, PAGE)
            take = min(PAGE - within, len(buf) - done)
            old = self.pages.get(page, bytes(PAGE))
            self.pages[page] = old[:within] + buf[done : done + take] + old[within + take :]
            self.dirty.add(page)
            at, done = at + take, done + take
        self.size = max(self.size, offset + len(buf))
        self.mtime_ns = time.time_ns()

    def truncate(self, size: int) -> None:
        for page in [p for p in self.pages if p * PAGE >= size]:
            del self.pages[page]
        if size % PAGE and size // PAGE in self.pages:
            keep = size % PAGE
            self.pages[size // PAGE] = self.pages[size // PAGE][:keep] + bytes(PAGE - keep)
        self.size = size
        self.dirty.add(size // PAGE)
        self.mtime_ns = time.time_ns()

    def persist_pages(self, pages: set[int], size: int) -> list[int]:
        """Make ``pages`` of the current image durable, the durable size ``size``; returns
        the pages to write to the backing file."""
        durable = self.durable if self.durable is not None else {}
        for page in [p for p in durable if p * PAGE >= size]:
            del durable[page]
        written = []
        for page in pages:
            if page * PAGE >= size:
                continue
            data = self.pages.get(page)
            if data is None:
                durable.pop(page, None)
            else:
                durable[page] = data
            written.append(page)
        self.durable, self.durable_size = durable, size
        return written


class CutFs(pyfuse3.Operations):
    """A flat directory of files, each with a current and a durable image."""

    def __init__(self, backing: str) -> None:
        super().__init__()
        self.backing = backing
        self.files: dict[int, File] = {}
        self.names: dict[bytes, int] = {}
        self.next_inode = pyfuse3.ROOT_INODE + 1
        self.dead = False
        self.cut_at = 0.0
        self.fsyncs = 0
        self.synced: list[float] = []  # when the last fsyncs of a file finished (wall time)
        self.fsync_delay_s = float(os.environ.get("CUTFS_FSYNC_DELAY_MS", "0")) / 1000
        self.uid, self.gid = os.getuid(), os.getgid()
        for name in sorted(os.listdir(backing)):
            path = os.path.join(backing, name)
            st = os.stat(path)
            file = self._new(name.encode(), st.st_mode, st.st_uid, st.st_gid)
            file.pages = _read_sparse(path)
            file.size = file.durable_size = st.st_size
            file.durable = dict(file.pages)

    # ------------------------------------------------------------------ the cut

    def cut(self, keep: float, seed: int) -> tuple[int, int]:
        self.cut_at = time.time()
        rng = random.Random(seed)
        kept = dropped = 0
        for file in self.files.values():
            if not file.linked or file.durable is None:
                dropped += len(file.dirty)
                continue
            chosen = {p for p in sorted(file.dirty) if rng.random() < keep}
            kept, dropped = kept + len(chosen), dropped + len(file.dirty) - len(chosen)
            if chosen:
                # pages past the durable size make it grow only if the disk kept them
                size = max(file.durable_size, min(file.size, (max(chosen) + 1) * PAGE))
                self._save(file, file.persist_pages(chosen, size))
        self.dead = True
        return kept, dropped

    def _save(self, file: File, pages: list[int]) -> None:
        """Write the durable pages to the backing file (the test machine does not crash:
        no fsync needed there)."""
        assert file.durable is not None
        path = os.path.join(self.backing, file.name.decode())
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            for page in pages:
                data = file.durable.get(page)
                if data is None:
                    os.pwrite(fd, bytes(PAGE), page * PAGE)
                else:
                    os.pwrite(fd, data, page * PAGE)
            os.ftruncate(fd, file.durable_size)
            os.fchmod(fd, stat.S_IMODE(file.mode))
            os.fchown(fd, file.uid, file.gid)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ helpers

    def _new(self, name: bytes, mode: int, uid: int, gid: int) -> File:
        file = File(self.next_inode, name, mode=mode, uid=uid, gid=gid, mtime_ns=time.time_ns())
        self.next_inode += 1
        self.files[file.inode] = file
        self.names[name] = file.inode
        return file

    def _alive(self) -> None:
        if self.dead:
            raise pyfuse3.FUSEError(errno.EIO)

    def _file(self, inode: int) -> File:
        try:
            return self.files[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def _attr(self, inode: int) -> pyfuse3.EntryAttributes:
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = inode
        attr.generation = 0
        attr.entry_timeout = 0
        attr.attr_timeout = 0
        if inode == pyfuse3.ROOT_INODE:
            attr.st_mode = stat.S_IFDIR | 0o777 | stat.S_ISVTX
            attr.st_nlink = 2
            attr.st_uid, attr.st_gid = self.uid, self.gid
            attr.st_size = 0
            now = time.time_ns()
        else:
            file = self._file(inode)
            attr.st_mode = file.mode
            attr.st_nlink = 1 if file.linked else 0
            attr.st_uid, attr.st_gid = file.uid, file.gid
            attr.st_size = file.size
            now = file.mtime_ns
        attr.st_atime_ns = attr.st_mtime_ns = attr.st_ctime_ns = now
        attr.st_blksize = PAGE
        attr.st_blocks = -(-attr.st_size // 512)
        return attr

    # ------------------------------------------------------------------ operations

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self._alive()
        if name == b".":
            return self._attr(parent_inode)
        if name == b"..":
            return self._attr(pyfuse3.ROOT_INODE)
        if parent_inode != pyfuse3.ROOT_INODE or name not in self.names:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(self.names[name])

    async def getattr(
        self, inode: int, ctx: pyfuse3.RequestContext | None = None
    ) -> pyfuse3.EntryAttributes:
        self._alive()
        return self._attr(inode)

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self._alive()
        if inode != pyfuse3.ROOT_INODE:
            file = self._file(inode)
            if fields.update_size:
                file.truncate(attr.st_size)
            if fields.update_mode:
                file.mode = stat.S_IFREG | stat.S_IMODE(attr.st_mode)
            if fields.update_uid:
                file.uid = attr.st_uid
            if fields.update_gid:
                file.gid = attr.st_gid
        return self._attr(inode)

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        self._alive()
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        self._alive()
        entries = sorted(self.names.items())
        for index, (name, inode) in enumerate(entries[start_id:], start_id + 1):
            if not pyfuse3.readdir_reply(token, name, self._attr(inode), index):
                break

    async def releasedir(self, fh: int) -> None:
        return None

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        self._alive()
        file = self._file(inode)
        if flags & os.O_TRUNC:
            file.truncate(0)
        return pyfuse3.FileInfo(fh=inode)

    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        self._alive()
        if parent_inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
        if name in self.names:
            raise pyfuse3.FUSEError(errno.EEXIST)
        file = self._new(name, stat.S_IFREG | stat.S_IMODE(mode), ctx.uid, ctx.gid)
        return pyfuse3.FileInfo(fh=file.inode), self._attr(file.inode)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        self._alive()
        return self._file(fh).read(off, size)

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self._alive()
        self._file(fh).write(off, buf)
        return len(buf)

    async def fsync(self, fh: int, datasync: bool) -> None:
        self._alive()
        if self.fsync_delay_s:  # (a slow disk: a cut lands inside a sync more often)
            await trio.sleep(self.fsync_delay_s)
            self._alive()
        file = self._file(fh)
        if file.linked:
            self._save(file, file.persist_pages(file.dirty, file.size))
            file.dirty.clear()
            self.synced = [*self.synced[1 - SYNC_TIMES :], time.time()]
        self.fsyncs += 1

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        self._alive()

    async def flush(self, fh: int) -> None:
        return None  # close() makes nothing durable

    async def release(self, fh: int) -> None:
        return None

    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._alive()
        inode = self.names.pop(name, None)
        if inode is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        self.files[inode].linked = False
        path = os.path.join(self.backing, name.decode())
        if os.path.exists(path):
            os.unlink(path)

    async def rename(
        self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes,
        flags: int, ctx: pyfuse3.RequestContext,
    ) -> None:  # fmt: skip
        """Durable at once, as unlink (the file's pages keep their own state)."""
        self._alive()
        inode = self.names.pop(name_old, None)
        if inode is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        replaced = self.names.pop(name_new, None)
        if replaced is not None:
            self.files[replaced].linked = False
        file = self.files[inode]
        file.name = name_new
        self.names[name_new] = inode
        old_path = os.path.join(self.backing, name_old.decode())
        new_path = os.path.join(self.backing, name_new.decode())
        if os.path.exists(old_path):
            os.replace(old_path, new_path)
        elif os.path.exists(new_path):
            os.unlink(new_path)

    async def forget(self, inode_list: list[tuple[int, int]]) -> None:
        for inode, _ in inode_list:
            file = self.files.get(inode)
            if file is not None and not file.linked:
                del self.files[inode]

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        self._alive()
        data = pyfuse3.StatvfsData()
        data.f_bsize = data.f_frsize = PAGE
        data.f_blocks = data.f_bfree = data.f_bavail = 1 << 20  # 4 GiB
        data.f_files = data.f_ffree = data.f_favail = 1 << 16
        data.f_namemax = 255
        return data


def _read_sparse(path: str) -> dict[int, bytes]:
    """The pages of a backing file that hold data (its holes skipped with SEEK_DATA)."""
    pages: dict[int, bytes] = {}
    fd = os.open(path, os.O_RDONLY)
    try:
        size, at = os.fstat(fd).st_size, 0
        while at < size:
            try:
                at = os.lseek(fd, at, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fd, at, os.SEEK_HOLE)
            for page in range(at // PAGE, -(-end // PAGE)):
                data = os.pread(fd, PAGE, page * PAGE)
                if any(data):
                    pages[page] = data + bytes(PAGE - len(data))
            at = -(-end // PAGE) * PAGE
    finally:
        os.close(fd)
    return pages


async def _control(
    fs: CutFs, path: str, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(path)
    sock.listen()
    task_status.started()  # (only now may "ready" be printed: the socket takes connections)
    async with trio.SocketListener(sock) as listener:
        while True:
            stream = await listener.accept()
            async with stream:
                line = (await stream.receive_some(256)).decode().split()
                if line and line[0] == "cut":
                    kept, dropped = fs.cut(float(line[1]), int(line[2]))
                    times = " ".join(f"{t:.6f}" for t in (fs.cut_at, *fs.synced))
                    await stream.send_all(f"cut {kept} {dropped} {times}\n".encode())
                elif line and line[0] == "stats":
                    await stream.send_all(f"fsyncs {fs.fsyncs}\n".encode())
                else:
                    await stream.send_all(b"error unknown command\n")


async def _serve(fs: CutFs, control: str) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(_control, fs, control)
        print("ready", flush=True)
        try:
            await pyfuse3.main()
        finally:
            nursery.cancel_scope.cancel()


def _only_aborted(exc: BaseException) -> bool:
    """The FUSE connection aborted, and nothing else (trio groups what its tasks raised)."""
    inner = getattr(exc, "exceptions", None)
    if inner is None:
        return isinstance(exc, ConnectionAbortedError)
    return all(_only_aborted(e) for e in inner)


def main(argv: list[str]) -> int:
    mountpoint, backing, control = argv
    fs = CutFs(backing)
    options = set(pyfuse3.default_options) | {"fsname=cutfs", "allow_other"}
    pyfuse3.init(fs, mountpoint, options)
    try:
        trio.run(_serve, fs, control)
    except BaseException as exc:
        if not _only_aborted(exc):  # (a cut aborts the connection: how this host ends)
            raise
    finally:
        pyfuse3.close(unmount=not fs.dead)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
