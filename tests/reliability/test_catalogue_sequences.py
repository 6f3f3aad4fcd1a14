"""Catalogue cases 19, 21, 22 and 23 (docs/reliability.md):
the idempotent producer's sequence errors and the broker's MESSAGE_TOO_LARGE, injected by
broker_stub. Each checks the futures, the offsets, and the log as a consumer reads it."""

from __future__ import annotations

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.errors import MessageSizeTooLargeError
from shmkafka.protocol.broker_errors import for_code
from tests.reliability.conftest import invariants, producer, read_back

pytestmark = pytest.mark.usefixtures("pool_removed")

LEADER_NOT_AVAILABLE, MESSAGE_TOO_LARGE, OUT_OF_ORDER, UNKNOWN_PRODUCER_ID = 5, 10, 45, 59
IDEMPOTENT = {"enable_idempotence": True, "acks": "all"}


def test_case_19_a_retried_head_goes_first_with_several_in_flight(
    stub: BrokerStub, pool_name: str
) -> None:
    """The first of several in-flight batches fails (LEADER_NOT_AVAILABLE); the broker then
    sees a sequence gap and answers OUT_OF_ORDER_SEQUENCE to the ones behind it. All are
    resent in order: the offsets follow the send order exactly."""
    with producer(stub, pool_name, batch_size=1024, max_in_flight_requests_per_connection=5,
                  **IDEMPOTENT) as p:  # fmt: skip
        first = [p.send("inflight", b"%03d" % i, partition=0) for i in range(10)]
        p.flush(30)  # the broker now knows the producer and its last sequence
        stub.control("fail_produce", code=LEADER_NOT_AVAILABLE, count=1, topic="inflight")
        stub.run(lambda: stub.faults.latency_ms.update({None: 100}))  # requests pile up
        burst = [p.send("inflight", b"%03d" % i + bytes(90), partition=0) for i in range(10, 70)]
        offsets = [f.get(30).offset for f in first + burst]
    assert offsets == list(range(70))
    sent = stub.errors_sent()
    assert sent.get(LEADER_NOT_AVAILABLE) == 1
    assert sent.get(OUT_OF_ORDER, 0) >= 1  # batches behind the failed one were in flight
    values = [m.value()[:3] for m in read_back(stub, "inflight", 70, partitions=1)]
    assert values == [b"%03d" % i for i in range(70)]


def test_case_21_unknown_producer_id_is_invisible_to_the_user(
    stub: BrokerStub, pool_name: str
) -> None:
    """The broker forgot the producer (its retention removed the producer state): a new
    producer id, sequences from 0, the batch sent again; every future succeeds, once."""
    with producer(stub, pool_name, **IDEMPOTENT) as p:
        first = [p.send("forgot", b"a%d" % i, partition=0) for i in range(50)]
        p.flush(30)
        before = p._handle.pool.producer_identity()
        stub.control("fail_produce", code=UNKNOWN_PRODUCER_ID, count=1, topic="forgot")
        second = [p.send("forgot", b"b%d" % i, partition=0) for i in range(50)]
        offsets = [f.get(30).offset for f in first + second]
        assert p._handle.pool.producer_identity()[0] not in (-1, before[0])
    assert offsets == list(range(100))
    assert stub.errors_sent().get(UNKNOWN_PRODUCER_ID) == 1
    values = [m.value() for m in read_back(stub, "forgot", 100, partitions=1)]
    assert values == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]


def test_case_22_head_of_line_out_of_order_fails_that_batch_only(
    stub: BrokerStub, pool_name: str
) -> None:
    """OUT_OF_ORDER_SEQUENCE for the oldest unacknowledged batch means the broker lost
    records it had acknowledged; resending cannot repair that. As the Java client does, that
    batch's futures fail with OutOfOrderSequenceNumberError (not retriable), the producer
    takes a new id and epoch, and later sends succeed."""
    with producer(stub, pool_name, max_in_flight_requests_per_connection=1, **IDEMPOTENT) as p:
        before = [p.send("gap", b"a%d" % i, partition=0) for i in range(10)]
        p.flush(30)
        identity = p._handle.pool.producer_identity()
        stub.control("fail_produce", code=OUT_OF_ORDER, count=1, topic="gap")
        lost = [p.send("gap", b"x%d" % i, partition=0) for i in range(10)]
        p.flush(30)
        for f in lost:
            assert f.failed() and isinstance(f.exception, for_code(OUT_OF_ORDER))
            assert not f.retriable()
        after = [p.send("gap", b"b%d" % i, partition=0) for i in range(10)]
        assert [f.get(30).offset for f in before + after] == list(range(20))
        assert p._handle.pool.producer_identity()[0] not in (-1, identity[0])
        assert invariants(pool_name) == []
    values = [m.value() for m in read_back(stub, "gap", 20, partitions=1)]
    assert values == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)]


def test_case_23_message_too_large_splits_then_fails_a_single_record(
    stub: BrokerStub, pool_name: str
) -> None:
    """MESSAGE_TOO_LARGE for a batch of two: the batch is split and both records delivered.
    For a one-record batch: only that record fails, with the broker's error."""
    with producer(stub, pool_name, linger_ms=200, **IDEMPOTENT) as p:
        p.partitions_for("large")
        stub.control("fail_produce", code=MESSAGE_TOO_LARGE, count=1, topic="large")
        pair = [p.send("large", b"p%d" % i, partition=0) for i in range(2)]
        assert [f.get(30).offset for f in pair] == [0, 1]
        stub.control("fail_produce", code=MESSAGE_TOO_LARGE, count=1, topic="large", partition=0)
        alone = p.send("large", b"alone", partition=0)
        other = p.send("large", b"other", partition=1)
        with pytest.raises(MessageSizeTooLargeError):
            alone.get(30)
        assert other.get(30).offset == 0
    assert stub.errors_sent().get(MESSAGE_TOO_LARGE) == 2
    got = sorted(m.value() for m in read_back(stub, "large", 3))
    assert got == [b"other", b"p0", b"p1"]
