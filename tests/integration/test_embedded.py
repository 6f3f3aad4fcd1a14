"""Under an embedding application server (uWSGI): ``sys.executable`` is the server's binary,
not a Python; a fork may skip Python's at-fork hooks; a producer whose Sender cannot start
must not leave its pool behind. On Tansu."""

from __future__ import annotations

import os
import stat
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
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
from tests.forking import held_by_another_thread, in_child, libc_fork, releasing
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


def _one_partition_topic(tansu: Peer) -> str:
    topic = unique_topic("embedded")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    return topic


CHILD_BOUND_S = 90  # (the child's send is bounded at 30 s; a child that hangs is killed)


def test_a_fork_without_pythons_hooks_gets_its_own_handle(tansu: Peer, pool_name: str) -> None:
    """libc's fork() called directly (holding the GIL, as an embedding server does): none of
    Python's at-fork hooks run, and the child must still not use the parent's handle."""
    topic = _one_partition_topic(tansu)
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    try:
        first = producer.send(topic, b"parent", key=b"k").get(30)
        parent_slot = producer._handle.pool.slot

        def child() -> int:
            handle = producer._handle  # re-made: its own slot
            metadata = producer.send(topic, b"child", key=b"k").get(30)
            return 0 if handle.pool.slot != parent_slot and metadata.offset > first.offset else 2

        assert in_child(libc_fork, child, CHILD_BOUND_S) == 0
        assert producer.send(topic, b"parent2", key=b"k").get(30).offset == first.offset + 2
    finally:
        producer.close()


def _threadings_lock(producer: KafkaProducer) -> AbstractContextManager[object]:
    """Taken as a thread starts or ends: Thread.start waited for it in the child for good,
    until the child ran the hooks its fork skipped (forks.py)."""
    lock: AbstractContextManager[object] = threading._active_limbo_lock  # type: ignore[attr-defined]
    return lock


def _slot_table_lock(producer: KafkaProducer) -> AbstractContextManager[object]:
    """The child claims its slot under it; its thread lock was keyed by inode only, so the
    parent's copy, taken, was the child's too (it hung there for good: CI, stop 57)."""
    return KernelLock.for_segment(producer._handle.pool.segment, SLOT_TABLE_BYTE)


@pytest.mark.parametrize("held", [_threadings_lock, _slot_table_lock])
def test_a_fork_without_hooks_while_a_thread_of_the_parent_holds_a_lock(
    tansu: Peer, pool_name: str, held: Callable[[KafkaProducer], AbstractContextManager[object]]
) -> None:
    topic = _one_partition_topic(tansu)
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    try:
        first = producer.send(topic, b"parent", key=b"k").get(30)

        def child() -> int:
            offset = producer.send(topic, b"child", key=b"k").get(30).offset
            return 0 if offset == first.offset + 1 else 2

        with held_by_another_thread(held(producer)) as release:
            assert in_child(releasing(libc_fork, release), child, CHILD_BOUND_S) == 0
    finally:
        producer.close()


def test_a_confluent_producer_forked_without_hooks_while_its_reports_are_queued(
    tansu: Peer, pool_name: str
) -> None:
    """The facade's own locks are the child's: the parent's completion thread may hold the
    reports' lock at the fork, and the child's produce, poll and flush must not wait on it."""
    topic = _one_partition_topic(tansu)
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name})
    try:
        producer.produce(topic, b"parent", key=b"k")
        assert producer.flush(30) == 0
        reports: list[tuple[object, int]] = []

        def report(error: object, message: Any) -> None:
            reports.append((error, message.offset()))

        def child() -> int:
            producer.produce(topic, b"child", key=b"k", on_delivery=report)
            left = producer.flush(30)
            return 0 if left == 0 and reports == [(None, 1)] else 2

        with held_by_another_thread(producer._reports_ready) as release:
            assert in_child(releasing(libc_fork, release), child, CHILD_BOUND_S) == 0
    finally:
        producer.flush(30)
