"""The Sender's metadata bookkeeping (sans-IO): a topic asked for while a Metadata request
is in flight is fetched by the next request, not forgotten until metadata.max.age.ms."""

from __future__ import annotations

from shmkafka.protocol.messages import MetadataResponse
from shmkafka.protocol.messages.metadata import (
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from shmkafka.sender.metadata import Metadata
from shmkafka.shm.pool import SharedPool


def _answer(*topics: str) -> MetadataResponse:
    return MetadataResponse(
        brokers=(MetadataResponseBroker(1, "127.0.0.1", 9092),),
        topics=tuple(
            MetadataResponseTopic(
                0, t, partitions=(MetadataResponsePartition(0, 0, 1, 0, (1,), (1,)),)
            )
            for t in topics
        ),
    )


def test_a_topic_requested_during_a_request_gets_the_next_one(pool: SharedPool) -> None:
    metadata = Metadata(pool, max_age_ms=300_000, backoff_ms=10)
    metadata.add_topics({"a"})
    first = metadata.request(0)
    assert [t.name for t in first.topics or ()] == ["a"]
    metadata.add_topics({"b"})  # an app process asks while the request is in flight
    metadata.on_response(_answer("a"), 5)
    assert metadata.need_update and metadata.due(20)
    second = metadata.request(20)
    assert sorted(t.name for t in second.topics or ()) == ["a", "b"]
    metadata.on_response(_answer("a", "b"), 25)
    assert not metadata.need_update and not metadata.due(1000)
    assert sorted(pool.directory.snapshot().topics) == ["a", "b"]
