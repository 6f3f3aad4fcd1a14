"""Under an embedding application server (uWSGI): ``sys.executable`` is the server's binary,
not a Python; a fork may skip Python's at-fork hooks; a producer whose Sender cannot start
must not leave its pool behind. On Tansu."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from shmkafka import Producer
from shmkafka.errors import PoolError
from shmkafka.kafka import KafkaProducer
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.supervisor import python_interpreter
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.layout import SLOT_TABLE_BYTE
from shmkafka.shm.locks import KernelLock
from tests.integration.kafka_io import cluster, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_sender_runs_on_a_real_python_when_sys_executable_is_a_server(
    tansu: Peer, pool_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uwsgi = _script(
        tmp_path / "uwsgi", "echo \"uwsgi: unrecognized option '--pool'\" >&2\nexit 1\n"
    )
    monkeypatch.setattr(sys, "executable", uwsgi)
    monkeypatch.delenv("SHMKAFKA_PYTHON", raising=False)
    found = python_interpreter()
    assert found != uwsgi and os.path.basename(found).startswith("python")
    assert os.path.samefile(os.path.dirname(found), os.path.join(sys.prefix, "bin"))
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    try:
        assert producer.send(unique_topic("embedded"), b"v", key=b"k").get(30).offset == 0
    finally:
        producer.close()


def test_shmkafka_python_names_the_senders_interpreter(
    tansu: Peer, pool_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    wrapper = _script(tmp_path / "py", f'touch "{marker}"\nexec "{sys.executable}" "$@"\n')
    monkeypatch.setenv("SHMKAFKA_PYTHON", wrapper)
    assert python_interpreter() == wrapper
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    try:
        producer.send(unique_topic("embedded"), b"v", key=b"k").get(30)
    finally:
        producer.close()
    assert marker.exists()


def test_a_failed_constructor_removes_the_pool_it_made(
    tansu: Peer, pool_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = _script(tmp_path / "py", "echo \"broken: unrecognized option '--pool'\" >&2\nexit 1\n")
    monkeypatch.setenv("SHMKAFKA_PYTHON", broken)
    with pytest.raises(KafkaError, match="unrecognized option"):
        KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    assert not SharedPool.exists(pool_name)


def test_no_interpreter_at_all_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHMKAFKA_PYTHON", raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "uwsgi"))
    for name in ("prefix", "exec_prefix", "base_prefix"):
        monkeypatch.setattr(sys, name, str(tmp_path))
    with pytest.raises(PoolError, match="SHMKAFKA_PYTHON"):
        python_interpreter()


CHILD_BOUND_S = 90  # (the child's send is bounded at 30 s; a child that hangs is killed)


def _wait_child(pid: int, bound_s: float) -> int:
    """The child's wait status, waited for up to ``bound_s``; then it is killed."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    stacks = _stacks(pid)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not end within {bound_s} s: killed. Where it was:\n"
                f"{stacks}\nand this process:\n{_stacks(os.getpid())}")  # fmt: skip


def _stacks(pid: int) -> str:
    """Every thread's Python stack in process ``pid`` (py-spy, a test dependency)."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    try:
        done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(py-spy: {exc})"
    return done.stdout + done.stderr


def test_a_fork_without_pythons_hooks_gets_its_own_handle(tansu: Peer, pool_name: str) -> None:
    """libc's fork() called directly (holding the GIL, as an embedding server does): none of
    Python's at-fork hooks run, and the child must still not use the parent's handle."""
    topic = unique_topic("embedded")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    try:
        first = producer.send(topic, b"parent", key=b"k").get(30)
        parent_slot = producer._handle.pool.slot
        pid = ctypes.PyDLL(None).fork()
        if pid == 0:  # the child: every outcome is its exit status
            status = 1
            try:
                handle = producer._handle  # re-made: its own slot
                metadata = producer.send(topic, b"child", key=b"k").get(30)
                fine = handle.pool.slot != parent_slot and metadata.offset > first.offset
                status = 0 if fine else 2
            finally:
                os._exit(status)
        assert os.waitstatus_to_exitcode(_wait_child(pid, CHILD_BOUND_S)) == 0
        assert producer.send(topic, b"parent2", key=b"k").get(30).offset == first.offset + 2
    finally:
        producer.close()


def test_a_fork_without_hooks_while_a_thread_of_the_parent_starts_or_ends(
    tansu: Peer, pool_name: str
) -> None:
    """threading's own lock, which a thread takes as it starts or ends, held at the fork by a
    thread of the parent: the child's completion thread could not start (Thread.start waited
    for good) had the child not run the hooks the fork skipped (forks.py)."""
    topic = unique_topic("embedded")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    try:
        first = producer.send(topic, b"parent", key=b"k").get(30)
        limbo = threading._active_limbo_lock  # type: ignore[attr-defined]
        with _held_across_the_fork(limbo) as release:
            pid = ctypes.PyDLL(None).fork()
            if pid == 0:
                status = 1
                try:
                    offset = producer.send(topic, b"child", key=b"k").get(30).offset
                    status = 0 if offset == first.offset + 1 else 2
                finally:
                    os._exit(status)
            release.set()
        assert os.waitstatus_to_exitcode(_wait_child(pid, CHILD_BOUND_S)) == 0
    finally:
        producer.close()


@contextmanager
def _held_across_the_fork(lock: AbstractContextManager[object]) -> Iterator[threading.Event]:
    """Another thread of the parent holds ``lock`` while the caller forks (as the completion
    thread may, queuing reports or claiming a slot); it lets go once the caller sets the
    event it is given."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert holding.wait(10)
    try:
        yield release
    finally:
        release.set()
        thread.join(10)


def test_a_fork_without_hooks_while_a_thread_holds_the_slot_table_lock(
    tansu: Peer, pool_name: str
) -> None:
    """The child claims its slot under the pool's slot-table lock: the thread lock the parent
    took it with, held at the fork by a thread that does not exist in the child, is not
    the child's (it hung there for good: CI, stop 57)."""
    topic = unique_topic("embedded")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    try:
        first = producer.send(topic, b"parent", key=b"k").get(30)
        table = KernelLock.for_segment(producer._handle.pool.segment, SLOT_TABLE_BYTE)
        with _held_across_the_fork(table) as release:
            pid = ctypes.PyDLL(None).fork()
            if pid == 0:
                status = 1
                try:
                    offset = producer.send(topic, b"child", key=b"k").get(30).offset
                    status = 0 if offset == first.offset + 1 else 2
                finally:
                    os._exit(status)
            release.set()
        assert os.waitstatus_to_exitcode(_wait_child(pid, CHILD_BOUND_S)) == 0
    finally:
        producer.close()


def test_a_confluent_producer_forked_without_hooks_while_its_reports_are_queued(
    tansu: Peer, pool_name: str
) -> None:
    """The facade's own locks are the child's: the parent's completion thread may hold the
    reports' lock at the fork, and the child's produce, poll and flush must not wait on it."""
    topic = unique_topic("embedded")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name})
    try:
        producer.produce(topic, b"parent", key=b"k")
        assert producer.flush(30) == 0
        with _held_across_the_fork(producer._reports_ready) as release:
            pid = ctypes.PyDLL(None).fork()
            if pid == 0:
                status = 1
                try:
                    reports: list[tuple[object, int]] = []

                    def report(error: object, message: Any) -> None:
                        reports.append((error, message.offset()))

                    producer.produce(topic, b"child", key=b"k", on_delivery=report)
                    left = producer.flush(30)
                    status = 0 if left == 0 and reports == [(None, 1)] else 2
                finally:
                    os._exit(status)
            release.set()
        assert os.waitstatus_to_exitcode(_wait_child(pid, CHILD_BOUND_S)) == 0
    finally:
        producer.flush(30)
