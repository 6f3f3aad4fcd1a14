"""sender/idempotence.py with responses handed to the Sender by the test (no broker): a
refused batch gives its range back to the batches after it, queued or in flight; an
in-flight batch so moved is sent again with its new sequence when the broker answers
OUT_OF_ORDER_SEQUENCE_NUMBER for its old one; none of it takes a new producer id."""

from __future__ import annotations

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.client import Client
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.sender.sender import Sender
from tests.sender.test_split import _answer, _send, rig

__all__ = ["rig"]  # (the fixture, from the split tests)

Rig = tuple[Client, SharedPool, Sender, int]


def _sequences(pool: SharedPool, deque_id: int) -> list[int]:
    return [pool.batches.read(b).base_sequence for b in pool.deques.batch_ids(deque_id)]


def test_a_refused_batch_gives_its_range_back(rig: Rig) -> None:
    handle, pool, sender, deque_id = rig
    first = [handle.send("t", b"a%d" % i, partition=0) for i in range(3)]
    refused = _send(sender, deque_id, 0)  # sequences 0..2
    second = [handle.send("t", b"b%d" % i, partition=0) for i in range(4)]
    in_flight = _send(sender, deque_id, 3)  # 3..6, in flight behind it
    third = [handle.send("t", b"c%d" % i, partition=0) for i in range(2)]
    queued = _send(sender, deque_id, 7)  # 7..8: sent, then answered out of order, queued
    assert pool.deques.next_sequence(deque_id) == 9

    _answer(sender, refused, ErrorCode.INVALID_RECORD, -1)  # nothing of it written
    assert pool.batches.read(in_flight.batch_id).base_sequence == 0  # moved down by 3
    assert pool.batches.read(queued.batch_id).base_sequence == 4
    assert pool.deques.next_sequence(deque_id) == 6

    # the broker answers the moved ones for their old ranges: sent again, with the new
    _answer(sender, in_flight, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    _answer(sender, queued, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert not sender.idempotence.reset_pending
    assert _sequences(pool, deque_id) == [0, 4]
    _answer(sender, _send(sender, deque_id, 0), ErrorCode.NONE, 10)
    _answer(sender, _send(sender, deque_id, 4), ErrorCode.NONE, 14)
    assert [f.get(5).offset for f in second + third] == [10, 11, 12, 13, 14, 15]
    assert all(f.failed() for f in first)
    assert pool.producer_identity() == (7, 0)  # no new producer id, no new epoch


def test_a_batch_whose_fate_is_unknown_asks_for_a_new_producer(rig: Rig) -> None:
    handle, pool, sender, deque_id = rig
    handle.send("t", b"x", partition=0)
    failed = _send(sender, deque_id, 0)
    # failed for good, with no word of whether the broker wrote it: its range is kept
    _answer(sender, failed, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
    assert pool.deques.next_sequence(deque_id) == 1
    handle.send("t", b"y", partition=0)
    later = _send(sender, deque_id, 1)
    _answer(sender, later, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)  # the gap, head of line
    assert sender.idempotence.reset_pending


def test_a_batch_in_flight_under_an_older_producer_holds_its_partition(rig: Rig) -> None:
    """A recovered batch goes again under the producer it was first sent by (recovery.py);
    until it is answered, nothing newer of its partition is sent: under the pool's producer
    it would not queue behind it at the broker, and would pass it if it failed."""
    handle, pool, sender, deque_id = rig
    handle.send("t", b"sent before the cut", partition=0)
    (batch,) = sender.accumulator.drain([deque_id], 1 << 20)
    pool.batches.set_producer_state(batch.batch_id, 4242, 3, 50)
    batch = sender.accumulator.refresh(batch)
    meta = sender.idempotence.meta(batch, pool.producer_identity())
    assert (meta.producer_id, meta.producer_epoch, meta.base_sequence) == (4242, 3, 50)
    sender.accumulator.finalize(batch, meta)
    sender.idempotence.sent(batch, meta, 1)
    sender.accumulator.mark_in_flight(batch)
    handle.send("t", b"newer", partition=0)
    assert not sender.idempotence.can_send(deque_id, 0, 1)
    _answer(sender, sender.accumulator.refresh(batch), ErrorCode.NONE, 10)
    assert sender.idempotence.can_send(deque_id, 0, 1)
    newer = _send(sender, deque_id, 0)  # (the pool's producer's first sequence)
    assert newer.info.producer_id == 7
    _answer(sender, newer, ErrorCode.NONE, 11)
    assert pool.producer_identity() == (7, 0)
