"""A host whose disk is a cutfs mount, and whose power can be cut.

``PowerHost.cut()`` is the power cut, in the order a real one imposes:
1. cutfs keeps a random share of the dirty pages and drops the rest (nothing later is written);
2. every process of the host dies (SIGKILL: the caller's ``victims``);
3. the FUSE connection is aborted, so the kernel's page cache of the mount, the dirty pages of
   every shared mapping included, is gone with it; the mount is detached;
4. the semaphores of the host's pools are removed (/dev/shm does not survive a reboot).
``boot()`` then mounts a new cutfs on the durable images: the host after the reboot.

Without /dev/fuse, fusermount3 or pyfuse3 the harness raises ``PowerCutUnavailable``, which
the tests turn into a failure naming the reason (never a skip: a power-cut test that cannot
cut has not passed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

FUSECTL = Path("/sys/fs/fuse/connections")
PAGE = 4096


class PowerCutUnavailable(RuntimeError):
    """This machine cannot make power cuts (named reason)."""


def check_available() -> None:
    if not os.path.exists("/dev/fuse"):
        raise PowerCutUnavailable("/dev/fuse is missing: the power-cut tests need FUSE")
    if shutil.which("fusermount3") is None:
        raise PowerCutUnavailable("fusermount3 is missing: apt-get install fuse3")
    try:
        import pyfuse3  # noqa: F401
    except ImportError as exc:
        raise PowerCutUnavailable(f"pyfuse3 does not import ({exc}): pip install pyfuse3") from None
    if os.geteuid() != 0:
        raise PowerCutUnavailable("aborting a FUSE connection needs root")


def available_or_fail() -> None:
    """Fail the calling test, naming the reason, when this machine cannot cut the power."""
    import pytest

    try:
        check_available()
    except PowerCutUnavailable as exc:
        pytest.fail(f"no power cut possible here: {exc}")


class PowerHost:
    """A cutfs mount at ``root/disk`` whose durable images live in ``root/backing``."""

    def __init__(self, root: Path) -> None:
        check_available()
        self.root = root
        self.disk = root / "disk"
        self.backing = root / "backing"
        self.control = root / "control.sock"
        self.disk.mkdir(parents=True, exist_ok=True)
        self.backing.mkdir(parents=True, exist_ok=True)
        self.daemon: subprocess.Popen[bytes] | None = None
        self.connection = -1
        self.boots = 0
        self.cut_at = 0.0  # the last cut's wall time, as cutfs made it
        self.synced: tuple[float, ...] = ()  # when the fsyncs before it finished (wall time)

    # ------------------------------------------------------------------ power

    def boot(self, timeout: float = 20.0, fsync_delay_ms: int = 0) -> None:
        assert self.daemon is None, "already up"
        with contextlib.suppress(FileNotFoundError):
            self.control.unlink()
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "tests.powercut.cutfs", str(self.disk), str(self.backing),
             str(self.control)],
            stdout=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "CUTFS_FSYNC_DELAY_MS": str(fsync_delay_ms)},
        )  # fmt: skip
        assert self.daemon.stdout is not None
        deadline = time.monotonic() + timeout
        line = self.daemon.stdout.readline()
        if line.strip() != b"ready":
            self._reap()
            raise RuntimeError(f"cutfs did not start: {line!r}")
        while not os.path.ismount(self.disk):
            if time.monotonic() > deadline:
                self._reap()
                raise RuntimeError(f"cutfs did not mount {self.disk} within {timeout} s")
            time.sleep(0.01)
        self.connection = os.minor(os.stat(self.disk).st_dev)  # fusectl's name for it
        self.boots += 1

    def cut(
        self,
        victims: Iterable[int] = (),
        keep: float = 0.0,
        seed: int = 0,
        pools: Iterable[str] = (),
    ) -> tuple[int, int]:
        """Cut the power: returns (dirty pages kept, dirty pages dropped). ``cut_at`` and
        ``synced`` are then the cut's wall time and when the last fsyncs before it finished."""
        answer = self._ask(f"cut {keep} {seed}").split()
        assert answer[0] == "cut", answer
        self.cut_at, *synced = (float(t) for t in answer[3:])
        self.synced = tuple(synced)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._abort()
        for pool in pools:
            _remove_semaphores(pool)
        return int(answer[1]), int(answer[2])

    def shutdown(self) -> None:
        """Unmount cleanly (end of a test): nothing is dropped beyond what is already lost."""
        if self.daemon is None:
            return
        self._abort()

    def fsyncs(self) -> int:
        return int(self._ask("stats").split()[1])

    # ------------------------------------------------------------------ details

    def _ask(self, command: str, timeout: float = 10.0) -> str:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(timeout)
            sock.connect(str(self.control))
            sock.sendall(command.encode() + b"\n")
            return sock.recv(256).decode()

    def _abort(self) -> None:
        if not FUSECTL.joinpath("..").exists():
            raise PowerCutUnavailable(f"{FUSECTL.parent} is missing")
        if not os.path.ismount(FUSECTL):  # (another test's host may mount it meanwhile)
            subprocess.run(["mount", "-t", "fusectl", "fusectl", str(FUSECTL)], check=False,
                           stderr=subprocess.DEVNULL)  # fmt: skip
        if not os.path.ismount(FUSECTL):
            raise PowerCutUnavailable(f"could not mount fusectl at {FUSECTL}")
        with contextlib.suppress(FileNotFoundError):  # (gone already: the daemon ended)
            (FUSECTL / str(self.connection) / "abort").write_text("1")
        subprocess.run(["fusermount3", "-u", "-z", str(self.disk)], check=False,
                       stderr=subprocess.DEVNULL)  # fmt: skip
        self._reap()

    def _reap(self) -> None:
        if self.daemon is None:
            return
        try:
            self.daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait(timeout=10)
        if self.daemon.stdout is not None:
            self.daemon.stdout.close()
        self.daemon = None


def _remove_semaphores(pool: str) -> None:
    """What /dev/shm held of the pool: its semaphores and its name (a pool_dir's link)."""
    for name in os.listdir("/dev/shm"):
        if name.startswith(f"sem.shmkafka.{pool}.") or name == f"shmkafka.{pool}":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")
