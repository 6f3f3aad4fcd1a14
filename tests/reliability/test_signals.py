"""A signal the app handles in Python (a worker's SIGTERM, SIGCHLD or SIGUSR1 handler) does
not end a wait of the library (shm/waits.py): a ``send()`` waiting for memory still returns
its future, and the completion thread still delivers every result. Before, posix_ipc's
``SignalError`` failed the send, or ended the completion thread."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from shmkafka import KafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from tests.interrupts import handled, interrupting

__all__ = ["handled"]  # (the fixture)

pytestmark = pytest.mark.usefixtures("pool_removed")


def test_the_completion_thread_delivers_through_signals(pool_name: str, handled: list[int]) -> None:
    with BrokerStub(partitions=2) as stub:
        producer = KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name, linger_ms=1)
        try:
            producer.send("t", b"warm").get(10)
            (completions,) = [t for t in threading.enumerate() if t.name == "shmkafka-completions"]
            assert completions.ident is not None
            with interrupting(completions.ident, 0.005):
                futures = []
                for i in range(100):
                    futures.append(producer.send("t", b"v%d" % i))
                    time.sleep(0.005)  # (the thread waits between results: signals land there)
                assert [f.get(10).topic for f in futures] == ["t"] * 100
            assert completions.is_alive()
        finally:
            producer.close(timeout=10)
    assert len(handled) > 20  # (the signals came, and their handler ran)


@contextmanager
def _memory_all_held(pool_name: str) -> Iterator[tuple[KafkaProducer, Any, Any]]:
    """A producer on a 64 KiB pool whose every slab is held (owned by no batch: as another
    process's memory), so its next new batch waits for memory: (producer, its pool's
    BufferPool, the run held). Closed with a bound."""
    with BrokerStub(partitions=1) as stub:
        producer = KafkaProducer(
            bootstrap_servers=stub.bootstrap, pool=pool_name, batch_size=1024,
            buffer_memory=64 * 1024, max_block_ms=10_000,
        )  # fmt: skip
        try:
            producer.send("t", b"warm").get(10)
            client = producer.shmkafka_client
            assert client is not None
            buffers = client.pool.buffers
            held = buffers.allocate(buffers.free_slabs() * buffers.slab_size, 0)  # all of it
            buffers.commit(held)
            yield producer, buffers, held
        finally:
            producer.close(timeout=10)


def test_a_send_waiting_for_memory_returns_through_signals(
    pool_name: str, handled: list[int]
) -> None:
    with _memory_all_held(pool_name) as (producer, buffers, held):
        release = threading.Timer(0.5, lambda: buffers.deallocate(held))
        release.start()
        try:
            with interrupting(threading.get_ident(), 0.005):
                started = time.monotonic()
                future = producer.send("t", b"v" * 2000)  # (a new batch: it waits for memory)
                waited = time.monotonic() - started
        finally:
            release.join(5)
        assert waited >= 0.4  # it waited, through the signals, until the memory came back
        assert future.get(10).topic == "t"
    assert len(handled) > 20


def test_a_send_ended_by_a_raising_handler_leaves_the_memory_queue(pool_name: str) -> None:
    """A handler that raises (Ctrl-C's) ends the wait with its exception, and the process
    leaves the memory queue: were it left at the head, every other process's allocation
    would wait behind it while memory is short."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with _memory_all_held(pool_name) as (producer, buffers, held):
            me = threading.get_ident()
            threading.Timer(0.2, signal.pthread_kill, (me, signal.SIGUSR1)).start()
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                producer.send("t", b"v" * 2000)  # (waits for memory, queued)
            assert time.monotonic() - started < 5
            assert buffers.waiters() == 0  # it left the queue
            buffers.deallocate(held)
            assert producer.send("t", b"after").get(10).topic == "t"
    finally:
        signal.signal(signal.SIGUSR1, before)
