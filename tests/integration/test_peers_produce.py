"""Produce requests built with our codec, against Tansu and librdkafka's mock cluster,
read back byte for byte with confluent-kafka's (and kafka-python's) consumers."""

from __future__ import annotations

import confluent_kafka
import pytest

from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.errors import UnsupportedApiVersionError
from shmkafka.protocol.messages import (
    CreateTopicsRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    ProduceRequest,
)
from shmkafka.protocol.messages.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from shmkafka.protocol.records import BatchMeta, build_batch
from tests.integration.kafka_io import (
    Cluster,
    cluster,
    consume_all,
    kafka_python_consume_all,
    unique_topic,
)
from tests.peers import Peer

pytestmark = pytest.mark.integration

BASE_TS = 1_700_000_000_000
Rec = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def sample_records(partition: int, batch: int, n: int = 5) -> list[Rec]:
    """Keys, a null key, an empty value, a null value, headers (one with a null value)."""
    out: list[Rec] = []
    for i in range(n):
        key = None if i == 1 else f"key-{partition}-{batch}-{i}".encode()
        value = b"" if i == 2 else None if i == 3 else f"value-{partition}-{batch}-{i}".encode()
        headers: list[tuple[str, bytes | None]] = (
            [("trace", f"t{i}".encode()), ("empty", None)] if i % 2 == 0 else []
        )
        out.append((BASE_TS + 1000 * batch + 7 * i, key, value, headers))
    return out


def watermarks(peer: Peer, topic: str, partitions: int) -> list[tuple[int, int]]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": peer.bootstrap, "group.id": unique_topic("wm"), "log_level": 3}
    )
    try:
        return [
            tuple(consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 10))
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _check_message(msg: confluent_kafka.Message, rec: Rec, offset: int) -> None:
    ts, key, value, headers = rec
    assert msg.offset() == offset
    assert msg.key() == key
    assert msg.value() == value
    assert (msg.headers() or []) == headers
    assert msg.timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, ts)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_produce_and_read_back(peer: Peer, codec: CompressionType) -> None:
    topic = unique_topic(f"produce-{codec.name.lower()}")
    expected: dict[tuple[int, int], Rec] = {}
    with cluster(peer) as c:
        partitions = c.ensure_topic(topic, 3)
        assert partitions == (3 if peer.can_create_topics else peer.auto_partitions)
        for batch_no in range(2):
            for partition in range(partitions):
                records = sample_records(partition, batch_no)
                result = c.produce(
                    topic, partition, build_batch(records, BatchMeta(compression=codec))
                )
                assert result.error_code == 0, result
                assert result.base_offset == batch_no * len(records)
                for i, rec in enumerate(records):
                    expected[(partition, result.base_offset + i)] = rec
        offsets = [
            (c.list_offset(topic, p, EARLIEST_TIMESTAMP), c.list_offset(topic, p, LATEST_TIMESTAMP))
            for p in range(partitions)
        ]
    # Our ListOffsets answers match confluent-kafka's view of the same partitions. The mock
    # reports the log end (10); Tansu 0.6 reports the last batch's base offset + 1 (6), to
    # confluent-kafka too.
    assert offsets == watermarks(peer, topic, partitions)
    assert offsets == [(0, 10 if peer.name == "mock" else 6)] * partitions
    messages = consume_all(peer, topic, list(range(partitions)), len(expected))
    assert len(messages) == len(expected)
    assert {(m.partition(), m.offset()) for m in messages} == set(expected)
    for msg in messages:
        _check_message(msg, expected[(msg.partition(), msg.offset())], msg.offset())
    theirs = kafka_python_consume_all(peer, topic, list(range(partitions)), len(expected))
    got = {(r.partition, r.offset): (r.timestamp, r.key, r.value, list(r.headers)) for r in theirs}
    assert got == {k: (ts, key, v, h) for k, (ts, key, v, h) in expected.items()}


def _init_producer(c: Cluster, topic: str) -> dict[str, int]:
    leader = c.client(c.leaders[(topic, 0)])
    init = leader.call(InitProducerIdRequest(transaction_timeout_ms=60_000), InitProducerIdResponse)
    assert init.error_code == 0, init
    assert init.producer_id >= 0 and init.producer_epoch >= 0
    return {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_idempotent_batches_keep_producer_state_in_the_log(
    peer: Peer, codec: CompressionType
) -> None:
    topic = unique_topic(f"idempotent-{codec.name.lower()}")
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        pid = _init_producer(c, topic)
        meta = {"compression": codec, **pid}
        first = build_batch(sample_records(0, 0, 3), BatchMeta(base_sequence=0, **meta))
        second = build_batch(sample_records(0, 1, 2), BatchMeta(base_sequence=3, **meta))
        r1 = c.produce(topic, 0, first)
        r2 = c.produce(topic, 0, second)
        assert (r1.error_code, r1.base_offset, r2.error_code, r2.base_offset) == (0, 0, 0, 3)
        fetched = c.fetch_batches(topic, 0, 5)
    headers = [
        (b.header.producer_id, b.header.producer_epoch, b.header.base_sequence) for b in fetched
    ]
    assert headers == [
        (pid["producer_id"], pid["producer_epoch"], 0),
        (pid["producer_id"], pid["producer_epoch"], 3),
    ]
    messages = consume_all(peer, topic, [0], 5)
    records = sample_records(0, 0, 3) + sample_records(0, 1, 2)
    assert len(messages) == 5
    for msg, rec in zip(messages, records, strict=True):
        _check_message(msg, rec, msg.offset())


def test_tansu_deduplicates_and_rejects_gaps(tansu: Peer) -> None:
    # librdkafka's mock cluster accepts any sequence (checked: it appended a resent batch),
    # so de-duplication is proven against Tansu.
    topic = unique_topic("dedup")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
        pid = _init_producer(c, topic)
        first = build_batch(sample_records(0, 0, 3), BatchMeta(base_sequence=0, **pid))
        assert c.produce(topic, 0, first).error_code == 0
        resent = c.produce(topic, 0, first)
        assert resent.error_code in (0, 46)  # DUPLICATE_SEQUENCE_NUMBER, or success
        if resent.error_code == 0:
            assert resent.base_offset == 0
        gap = build_batch(sample_records(0, 2, 1), BatchMeta(base_sequence=9, **pid))
        assert c.produce(topic, 0, gap).error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        fetched = c.fetch_batches(topic, 0, 3)
    assert [r.offset for b in fetched for r in b.records] == [0, 1, 2]
    messages = consume_all(tansu, topic, [0], 3)
    assert [m.offset() for m in messages] == [0, 1, 2]


def test_create_topics_negotiation(peer: Peer) -> None:
    with cluster(peer) as c:
        client = c.client()
        if peer.can_create_topics:
            assert client.version(CreateTopicsRequest) == CreateTopicsRequest.MAX_VERSION
        else:
            # librdkafka's mock cluster does not offer CreateTopics: a typed error, not a hang.
            with pytest.raises(UnsupportedApiVersionError, match="api key 19"):
                client.version(CreateTopicsRequest)


def test_api_versions_negotiated_per_api(peer: Peer) -> None:
    with cluster(peer) as c:
        client = c.client()
        broker = client.broker_versions
        # ApiVersions itself: v3 where offered. The mock cluster offers only v0-v2 and answers
        # v3 with a body neither we nor kafka-python can read; we then fall back to v0.
        assert client.api_versions_used == (3 if peer.name == "tansu" else 0)
        assert broker[18][1] >= 3 if peer.name == "tansu" else broker[18][1] == 2
        assert client.version(ProduceRequest) == min(9, broker[0][1])
        assert client.version(InitProducerIdRequest) == min(4, broker[22][1])
        assert client.version(MetadataRequest) == min(12, broker[3][1])
