"""cutfs loses exactly what was not flushed: the power-cut tests stand on it."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.powercut.host import PAGE, PowerHost, available_or_fail


@pytest.fixture
def host(tmp_path: Path) -> Iterator[PowerHost]:
    available_or_fail()
    power = PowerHost(tmp_path)
    power.boot()
    try:
        yield power
    finally:
        power.shutdown()


def _read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_msync_survives_and_unsynced_mapped_pages_are_lost(host: PowerHost) -> None:
    fd = os.open(host.disk / "pool", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 3 * PAGE)
    m = mmap.mmap(fd, 3 * PAGE)
    m[0:6] = b"synced"
    m.flush()  # msync(MS_SYNC)
    m[PAGE : PAGE + 8] = b"unsynced"
    m[2 * PAGE : 2 * PAGE + 5] = b"later"
    assert m[PAGE : PAGE + 8] == b"unsynced"  # the page cache holds it...
    host.cut()
    m.close()
    with contextlib.suppress(OSError):
        os.close(fd)
    host.boot()
    image = _read(host.disk / "pool")  # ...and the cut took it away
    assert len(image) == 3 * PAGE
    assert image[0:6] == b"synced"
    assert image[PAGE:] == bytes(2 * PAGE)


def test_written_but_not_fsynced_is_lost_and_a_never_synced_file_is_gone(
    host: PowerHost,
) -> None:
    with open(host.disk / "kept", "wb") as f:
        f.write(b"a" * 100)
        f.flush()
        os.fsync(f.fileno())
        f.write(b"b" * 100)  # reaches cutfs (write-through), never synced
        f.flush()
    with open(host.disk / "never", "wb") as f:
        f.write(b"c")
    assert _read(host.disk / "kept") == b"a" * 100 + b"b" * 100
    kept, dropped = host.cut(keep=0.0)
    assert (kept, dropped) == (0, 2)  # a page of "kept", the page of "never"
    host.boot()
    assert sorted(os.listdir(host.disk)) == ["kept"]
    assert _read(host.disk / "kept") == b"a" * 100


def test_a_cut_that_keeps_some_pages_keeps_whole_pages_only(host: PowerHost) -> None:
    with open(host.disk / "f", "wb") as f:
        f.write(bytes(8 * PAGE))
        os.fsync(f.fileno())
        for page in range(8):
            f.seek(page * PAGE)
            f.write(bytes([page + 1]) * PAGE)
        f.flush()
    kept, dropped = host.cut(keep=0.5, seed=7)
    assert kept + dropped == 8 and 0 < kept < 8  # (seed 7 keeps some, not all)
    host.boot()
    image = _read(host.disk / "f")
    pages = [image[p * PAGE : (p + 1) * PAGE] for p in range(8)]
    survivors = [p for p in range(8) if pages[p] == bytes([p + 1]) * PAGE]
    assert len(survivors) == kept
    assert all(pages[p] == bytes(PAGE) for p in range(8) if p not in survivors)


def test_nothing_is_written_after_the_cut(host: PowerHost) -> None:
    fd = os.open(host.disk / "f", os.O_CREAT | os.O_RDWR, 0o600)
    os.write(fd, b"x")
    os.fsync(fd)
    host._ask("cut 1.0 0")  # the cut alone, the processes still running
    with pytest.raises(OSError) as failed:
        os.write(fd, b"y")
        os.fsync(fd)
    assert failed.value.errno == errno.EIO
    host.cut()  # kills nothing more, aborts the connection
    with contextlib.suppress(OSError):
        os.close(fd)
    host.boot()
    assert _read(host.disk / "f") == b"x"
