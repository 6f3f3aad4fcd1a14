"""``Future.delivery()``: a record's result as every API builds its own from it (offset,
timestamp and its type, log start offset, error), checked against kafka-python's
RecordMetadata of the same future, for a create-time and a log-append-time topic."""

from __future__ import annotations

import pytest

from shmkafka import KafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.errors import MessageSizeTooLargeError
from shmkafka.producer.futures import TIMESTAMP_CREATE, TIMESTAMP_LOG_APPEND

pytestmark = pytest.mark.usefixtures("pool_removed")


def test_delivery_gives_what_record_metadata_says(pool_name: str) -> None:
    stub = BrokerStub(partitions=1, log_append_time_topics=frozenset({"appended"}))
    with stub, KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name) as producer:
        created = producer.send("created", b"a", timestamp_ms=1_000)
        appended = producer.send("appended", b"b", timestamp_ms=1_000)
        assert created.delivery() is None or created.is_done  # (None until done)
        producer.flush(10)
        first, second = created.get(10), appended.get(10)
        one, two = created.delivery(), appended.delivery()
    assert one is not None and two is not None
    assert (one.offset, one.timestamp, one.timestamp_type) == (
        first.offset, 1_000, TIMESTAMP_CREATE,
    )  # fmt: skip
    assert (two.offset, two.timestamp, two.timestamp_type) == (
        second.offset, second.timestamp, TIMESTAMP_LOG_APPEND,
    )  # fmt: skip
    assert two.timestamp != 1_000 and one.error is None and two.error is None
    assert one.log_start_offset == 0


def test_delivery_of_a_failed_record_carries_its_error(pool_name: str) -> None:
    stub = BrokerStub(partitions=1, max_message_bytes=1_000)
    with stub, KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name) as producer:
        future = producer.send("small", b"x" * 5_000)
        producer.flush(10)
    result = future.delivery()
    assert result is not None and isinstance(result.error, MessageSizeTooLargeError)
    assert result.offset == -1
