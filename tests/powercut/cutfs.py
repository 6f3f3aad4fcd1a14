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
``cut KEEP SEED`` -> ``cut PAGES_KEPT PAGES_DROPPED``; ``stats`` -> ``fsyncs N``.
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


@dataclass
class File:
    inode: int
    name: bytes
    data: bytearray = field(default_factory=bytearray)
    durable: bytearray | None = None  # None: never synced (lost by a cut)
    dirty: set[int] = field(default_factory=set)
    mode: int = stat.S_IFREG | 0o600
    uid: int = 0
    gid: int = 0
    mtime_ns: int = 0
    linked: bool = True

    def write(self, offset: int, buf: bytes) -> None:
        end = offset + len(buf)
        if end > len(self.data):
            self.data.extend(bytes(end - len(self.data)))
        self.data[offset:end] = buf
        self.dirty.update(range(offset // PAGE, (end + PAGE - 1) // PAGE))
        self.mtime_ns = time.time_ns()

    def truncate(self, size: int) -> None:
        if size < len(self.data):
            del self.data[size:]
        else:
            self.data.extend(bytes(size - len(self.data)))
        self.dirty.add(size // PAGE)
        self.mtime_ns = time.time_ns()

    def persist_pages(self, pages: set[int], size: int) -> None:
        """Copy ``pages`` of the current image into the durable one, sized ``size``."""
        durable = self.durable if self.durable is not None else bytearray()
        if size < len(durable):
            del durable[size:]
        else:
            durable.extend(bytes(size - len(durable)))
        for page in pages:
            start = page * PAGE
            chunk = self.data[start : min(start + PAGE, size)]
            durable[start : start + len(chunk)] = chunk
        self.durable = durable


class CutFs(pyfuse3.Operations):
    """A flat directory of files, each with a current and a durable image."""

    def __init__(self, backing: str) -> None:
        super().__init__()
        self.backing = backing
        self.files: dict[int, File] = {}
        self.names: dict[bytes, int] = {}
        self.next_inode = pyfuse3.ROOT_INODE + 1
        self.dead = False
        self.fsyncs = 0
        self.uid, self.gid = os.getuid(), os.getgid()
        for name in sorted(os.listdir(backing)):
            with open(os.path.join(backing, name), "rb") as f:
                image = f.read()
            st = os.stat(os.path.join(backing, name))
            file = self._new(name.encode(), st.st_mode, st.st_uid, st.st_gid)
            file.data = bytearray(image)
            file.durable = bytearray(image)

    # ------------------------------------------------------------------ the cut

    def cut(self, keep: float, seed: int) -> tuple[int, int]:
        rng = random.Random(seed)
        kept = dropped = 0
        for file in self.files.values():
            if not file.linked or file.durable is None:
                dropped += len(file.dirty)
                continue
            chosen = {p for p in file.dirty if rng.random() < keep}
            kept, dropped = kept + len(chosen), dropped + len(file.dirty) - len(chosen)
            if chosen:
                # pages past the durable size make it grow only if the disk kept them
                size = max(len(file.durable), min(len(file.data), (max(chosen) + 1) * PAGE))
                file.persist_pages(chosen, size)
                self._save(file)
        self.dead = True
        return kept, dropped

    def _save(self, file: File) -> None:
        assert file.durable is not None
        path = os.path.join(self.backing, file.name.decode())
        with open(path + ".tmp", "wb") as f:
            f.write(file.durable)
        os.chmod(path + ".tmp", stat.S_IMODE(file.mode))
        os.chown(path + ".tmp", file.uid, file.gid)
        os.replace(path + ".tmp", path)

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
            attr.st_size = len(file.data)
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
        return bytes(self._file(fh).data[off : off + size])

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self._alive()
        self._file(fh).write(off, buf)
        return len(buf)

    async def fsync(self, fh: int, datasync: bool) -> None:
        self._alive()
        file = self._file(fh)
        if file.linked:
            file.persist_pages(file.dirty, len(file.data))
            file.dirty.clear()
            self._save(file)
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


async def _control(fs: CutFs, path: str) -> None:
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(path)
    sock.listen()
    async with trio.SocketListener(sock) as listener:
        while True:
            stream = await listener.accept()
            async with stream:
                line = (await stream.receive_some(256)).decode().split()
                if line and line[0] == "cut":
                    kept, dropped = fs.cut(float(line[1]), int(line[2]))
                    await stream.send_all(f"cut {kept} {dropped}\n".encode())
                elif line and line[0] == "stats":
                    await stream.send_all(f"fsyncs {fs.fsyncs}\n".encode())
                else:
                    await stream.send_all(b"error unknown command\n")


async def _serve(fs: CutFs, control: str) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_control, fs, control)
        print("ready", flush=True)
        try:
            await pyfuse3.main()
        finally:
            nursery.cancel_scope.cancel()


def main(argv: list[str]) -> int:
    mountpoint, backing, control = argv
    fs = CutFs(backing)
    options = set(pyfuse3.default_options) | {"fsname=cutfs", "allow_other"}
    pyfuse3.init(fs, mountpoint, options)
    try:
        trio.run(_serve, fs, control)
    finally:
        pyfuse3.close(unmount=not fs.dead)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
