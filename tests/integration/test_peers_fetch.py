"""Records produced by confluent-kafka, fetched and decoded with our codec; and our
partitioners against the partitions confluent-kafka picks."""

from __future__ import annotations

import confluent_kafka
import pytest

from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.hashing import consistent_partition, murmur2_partition
from shmkafka.protocol.messages import FetchRequest
from tests.integration.kafka_io import cluster, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.integration


def _produce_with_confluent(
    peer: Peer, topic: str, codec: CompressionType, count: int
) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int]]:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": peer.bootstrap,
            "compression.type": codec.name.lower(),
            "linger.ms": 50,
            "log_level": 3,
        }
    )
    sent = []
    for i in range(count):
        key = None if i % 5 == 0 else f"k{i}".encode()
        value = (f"value-{i}-" * (i % 7 + 1)).encode()
        headers = [("n", str(i).encode())]
        ts = 1_750_000_000_000 + i
        producer.produce(topic, value, key, partition=0, headers=headers, timestamp=ts)
        sent.append((key, value, headers, ts))
    assert producer.flush(20) == 0
    return sent


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
@pytest.mark.parametrize("fetch_version", [4, 12])
def test_decode_fetch_of_confluent_records(
    peer: Peer, codec: CompressionType, fetch_version: int
) -> None:
    topic = unique_topic(f"fetch-{codec.name.lower()}")
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        sent = _produce_with_confluent(peer, topic, codec, 40)
        assert fetch_version <= c.client(c.leaders[(topic, 0)]).version(FetchRequest)
        high_watermark = c.fetch(topic, 0, 0, fetch_version).high_watermark
        assert high_watermark == len(sent)
        batches = c.fetch_batches(topic, 0, len(sent), fetch_version)
    if codec != CompressionType.NONE:
        # librdkafka sends a batch uncompressed when compressing does not shrink it (a
        # batch of one or two small records under gzip): larger batches must be compressed.
        assert all(b.header.compression == codec for b in batches if len(b.records) >= 5)
        assert any(b.header.compression == codec for b in batches)
    records = [r for b in batches for r in b.records]
    assert [r.offset for r in records] == list(range(len(sent)))
    got = [(r.key, r.value, list(r.headers), r.timestamp) for r in records]
    assert got == sent


@pytest.mark.parametrize(
    ("partitioner", "ours"),
    [("murmur2_random", murmur2_partition), ("consistent", consistent_partition)],
)
def test_partitioners_match_confluent(mock_cluster: Peer, partitioner: str, ours: object) -> None:
    topic = unique_topic(f"partitioner-{partitioner}")
    with cluster(mock_cluster) as c:
        partitions = c.ensure_topic(topic, 4)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": mock_cluster.bootstrap,
            "partitioner": partitioner,
            "linger.ms": 20,
            "log_level": 3,
        }
    )
    chosen: dict[bytes, int] = {}

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        assert err is None, err
        chosen[msg.key()] = msg.partition()

    keys = [f"user-{i}-{i * 7919 % 1013}".encode() for i in range(1000)]
    for key in keys:
        producer.produce(topic, b"v", key, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert len(chosen) == 1000
    assert callable(ours)
    mismatches = [k for k in keys if ours(k, partitions) != chosen[k]]
    assert mismatches == []
    assert len(set(chosen.values())) == partitions  # the keys really spread
