"""The Sender's metadata bookkeeping (sans-IO): a topic asked for while a Metadata request
is in flight is fetched by the next request, not forgotten until metadata.max.age.ms."""

from __future__ import annotations

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.messages import MetadataResponse
from shmkafka.protocol.messages.metadata import (
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from shmkafka.sender.metadata import Metadata


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
    assert metadata.due(0)
    first = metadata.request(0)  # the first request is a full one: nothing is known yet
    assert [t.name for t in first.topics or ()] == ["a"]
    metadata.add_topics({"b"})  # an app process asks while the request is in flight
    assert not metadata.due(1)  # one request at a time
    metadata.on_response(_answer("a"), 5)
    assert metadata.due(5)  # a new topic is asked for at once, not after the backoff
    second = metadata.request(5)
    assert [t.name for t in second.topics or ()] == ["b"]  # alone: "a" is known
    metadata.on_response(_answer("b"), 7)
    assert not metadata.due(1000)
    assert sorted(pool.directory.snapshot().topics) == ["a", "b"]


def test_an_incomplete_topic_is_asked_again_after_the_backoff(pool: SharedPool) -> None:
    metadata = Metadata(pool, max_age_ms=300_000, backoff_ms=10)
    metadata.add_topics({"a"})
    metadata.request(0)
    creating = MetadataResponse(
        brokers=(MetadataResponseBroker(1, "127.0.0.1", 9092),),
        topics=(MetadataResponseTopic(5, "a", partitions=()),),  # LEADER_NOT_AVAILABLE
    )
    metadata.on_response(creating, 2)
    assert not metadata.due(5) and metadata.due(12)
    again = metadata.request(12)
    assert [t.name for t in again.topics or ()] == ["a"]
    metadata.on_response(_answer("a"), 14)
    assert pool.directory.partitions("a") is not None and not metadata.due(1000)


def test_the_periodic_refresh_asks_for_every_known_topic(pool: SharedPool) -> None:
    metadata = Metadata(pool, max_age_ms=1000, backoff_ms=10)
    metadata.add_topics({"a", "b"})
    metadata.on_response(_answer("a", "b"), metadata.request(0) and 1)
    assert not metadata.due(500) and metadata.due(1001)
    refresh = metadata.request(1001)
    assert sorted(t.name for t in refresh.topics or ()) == ["a", "b"]


def test_topics_not_asked_for_are_never_published(pool: SharedPool) -> None:
    # Tansu answers a request for no topic with every topic of the cluster.
    metadata = Metadata(pool, max_age_ms=300_000, backoff_ms=10)
    first = metadata.request(0)
    assert first.topics == ()
    metadata.on_response(_answer("someone-elses", "another"), 3)
    assert metadata.brokers == {1: ("127.0.0.1", 9092)}  # the brokers still count
    assert pool.directory.snapshot().topics == {}
    metadata.add_topics({"a"})
    metadata.on_response(_answer("a", "someone-elses"), metadata.request(4) and 5)
    assert sorted(pool.directory.snapshot().topics) == ["a"]
