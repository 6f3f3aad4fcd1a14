"""Every record gets its result (producer/liveness.py): a record whose batch no longer holds
it, and whose result never came, is failed with ResultLostError within about a second and
counted as an internal error; a record still held is never failed. The Sender runs in
this process and the test plays its mistakes (no broker: responses are handed over)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from shmkafka.cli.exporter import PoolCollector
from shmkafka.errors import ResultLostError
from shmkafka.pool.metrics import kafka_metrics, sample
from shmkafka.pool.shared_pool import SharedPool, internal_errors
from shmkafka.pool.stat import format_stat, segment_stat
from shmkafka.producer import liveness
from shmkafka.producer.client import Client
from shmkafka.sender.sender import Sender
from shmkafka.shm.rings import Completion
from tests.sender.test_split import _answer, _send, rig

__all__ = ["rig"]  # (the fixture, from the split tests)

Rig = tuple[Client, SharedPool, Sender, int]
NOTICED_S = 2 * liveness.CHECK_S + 1.0  # a lost result is failed within this


def _failure_of(future: object, within: float = NOTICED_S) -> BaseException:
    started = time.monotonic()
    with pytest.raises(ResultLostError) as failed:
        future.get(within)  # type: ignore[attr-defined]
    assert time.monotonic() - started < within
    return failed.value


def _assert_shown(pool: SharedPool, count: int) -> None:
    """``shmkafka stat`` (text and JSON), the metrics and the Prometheus exporter show it."""
    stat = segment_stat(pool.segment)
    assert stat["internal_errors"] == count
    assert f"internal errors: {count} " in format_stat(stat)
    values = kafka_metrics(None, sample(pool.segment))
    assert values["internal-error-total"] == count
    collector = PoolCollector()
    collector.latest = {pool.name: values}
    (family,) = [f for f in collector.collect() if f.name == "shmkafka_internal_error"]
    assert [s.value for s in family.samples if s.name.endswith("_total")] == [count]


@pytest.mark.catalogue(38)
def test_a_batch_freed_without_its_result_fails_its_records(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    handle, sender_pool, sender, deque_id = rig
    futures = [handle.send("t", b"v%d" % i, partition=0) for i in range(3)]
    batch = _send(sender, deque_id, 0)
    with caplog.at_level(logging.ERROR, logger="shmkafka.producer"):
        sender.accumulator.complete(batch)  # freed, and no result posted (a lost post)
        errors = [_failure_of(f) for f in futures]
    cause = f"batch {batch.batch_id} generation {batch.info.generation} was freed"
    assert all(cause in str(e) for e in errors)
    assert internal_errors(sender_pool.segment) == 3
    _assert_shown(sender_pool, 3)
    assert [r.levelname for r in caplog.records if "internal error" in r.message] == ["ERROR"]
    assert handle.undelivered() == 0


def test_a_result_posted_to_another_generation_fails_its_records(rig: Rig) -> None:
    handle, sender_pool, sender, deque_id = rig
    future = handle.send("t", b"v", partition=0)
    batch = _send(sender, deque_id, 0)
    wrong = Completion(batch.batch_id, batch.info.generation + 1, 5, -1, -1, 0)
    assert sender.accumulator.post_completion(batch, wrong) == []  # misrouted
    sender.accumulator.complete(batch)
    assert "was freed" in str(_failure_of(future))
    assert internal_errors(sender_pool.segment) == 1


@pytest.mark.catalogue(38)
def test_a_batch_descriptor_reused_fails_the_records_of_its_old_generation(rig: Rig) -> None:
    handle, sender_pool, sender, deque_id = rig
    future = handle.send("t", b"v", partition=0)
    batch = _send(sender, deque_id, 0)
    with handle._lock:  # (no check in between: it sees the descriptor reused, not freed)
        sender.accumulator.complete(batch)
        sender_pool.batches.open(batch.batch_id, deque_id, 1, 61, 0, 0)
    cause = f"generation {batch.info.generation} was reused (now generation "
    assert cause in str(_failure_of(future))
    sender_pool.batches.clear(batch.batch_id)
    assert internal_errors(sender_pool.segment) == 1


def test_records_held_by_their_batch_are_never_failed(rig: Rig) -> None:
    handle, sender_pool, sender, deque_id = rig
    future = handle.send("t", b"v", partition=0)
    batch = _send(sender, deque_id, 0)  # in flight, answered late
    time.sleep(3 * liveness.CHECK_S)  # (several checks must pass and leave it alone)
    assert not future.is_done
    _answer(sender, batch, 0, 42)
    assert future.get(5).offset == 42
    assert internal_errors(sender_pool.segment) == 0


def test_records_of_a_split_batch_are_held_by_its_halves(rig: Rig) -> None:
    handle, sender_pool, sender, deque_id = rig
    futures = [handle.send("t", b"value-%d" % i, b"k", partition=0) for i in range(4)]
    _answer(sender, _send(sender, deque_id, 0), 10, -1)  # MESSAGE_TOO_LARGE: split, freed
    sender_pool.set_producer_identity(8, 0)
    time.sleep(3 * liveness.CHECK_S)
    assert not any(f.is_done for f in futures)
    _answer(sender, _send(sender, deque_id, 0), 0, 100)
    _answer(sender, _send(sender, deque_id, 2), 0, 200)
    assert [f.get(5).offset for f in futures] == [100, 101, 200, 201]
    assert internal_errors(sender_pool.segment) == 0


def test_flush_without_a_timeout_returns_once_a_lost_result_is_failed(rig: Rig) -> None:
    handle, _, sender, deque_id = rig
    future = handle.send("t", b"v", partition=0)
    sender.accumulator.complete(_send(sender, deque_id, 0))
    flusher = threading.Thread(target=handle.flush)  # no timeout: as an app calls it
    flusher.start()
    flusher.join(NOTICED_S)
    assert not flusher.is_alive()
    assert isinstance(future.exception, ResultLostError)
