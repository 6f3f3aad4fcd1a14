"""The pool is private to the user that created it: segment and semaphores 0600, and a pool
of another uid is refused with a clear error, in both directions (checked with a second uid
through os.setuid in a forked child, which needs root)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

import pytest

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.errors import SegmentOwnerError
from tests.conftest import SMALL

OTHER_UID = 65534  # nobody

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="switching to a second uid (os.setuid) needs root"
)


def test_segment_and_semaphores_are_0600(pool: SharedPool) -> None:
    pool.locks.acquire(0)  # semaphores exist once used
    pool.locks.release(0)
    files = [n for n in os.listdir("/dev/shm") if pool.name in n]
    assert any(n.startswith("sem.") for n in files) and f"shmkafka.{pool.name}" in files
    for name in files:
        st = os.stat(f"/dev/shm/{name}")
        assert stat.S_IMODE(st.st_mode) == 0o600, name
        assert st.st_uid == os.getuid()


def _fork_as_other_user(body: Callable[[], int]) -> int:
    """Fork a child that runs ``body`` as OTHER_UID (its return value is the exit status)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's verdict is its exit status
        try:
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            os._exit(body())
        except BaseException:  # noqa: BLE001 - a child never returns into pytest
            os._exit(99)
    return pid


def _exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@needs_root
def test_a_pool_of_root_is_refused_to_another_user(pool: SharedPool) -> None:
    owner = os.getuid()

    def attach() -> int:
        try:
            SharedPool.open(pool.name)
        except SegmentOwnerError as exc:
            return 0 if f"belongs to uid {owner}, not {OTHER_UID}" in str(exc) else 2
        return 1  # attached: the pool was not private

    assert _exit_code(_fork_as_other_user(attach)) == 0


@needs_root
def test_a_pool_of_another_user_is_refused(pool_name: str) -> None:
    created_r, created_w = os.pipe()
    tried_r, tried_w = os.pipe()

    def create() -> int:
        pool = SharedPool.open(pool_name, SMALL)
        os.write(created_w, b"c")
        os.read(tried_r, 1)  # until the parent tried
        pool.destroy()
        return 0

    pid = _fork_as_other_user(create)
    try:
        assert os.read(created_r, 1) == b"c", "the other user could not create its pool"
        with pytest.raises(SegmentOwnerError, match=f"belongs to uid {OTHER_UID}"):
            SharedPool.open(pool_name, SMALL)
        with pytest.raises(SegmentOwnerError, match=f"belongs to uid {OTHER_UID}"):
            SharedPool.open(pool_name)
    finally:
        os.write(tried_w, b"t")
        status = _exit_code(pid)
        for fd in (created_r, created_w, tried_r, tried_w):
            os.close(fd)
    assert status == 0
    assert not os.path.exists(f"/dev/shm/shmkafka.{pool_name}")
