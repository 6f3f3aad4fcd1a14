"""MESSAGE_TOO_LARGE with several records: the Sender splits the batch, and each half
completes its own part of the original futures (responses simulated, no broker)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial

import pytest

from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.pool.accumulator import DrainedBatch
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.client import Client
from shmkafka.protocol.broker_errors import for_code
from shmkafka.protocol.messages import ProduceResponse
from shmkafka.protocol.messages.produce import PartitionProduceResponse, TopicProduceResponse
from shmkafka.sender.connection import ClientResponse
from shmkafka.sender.sender import Sender
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK, SEALED
from tests.sender.memnet import MemoryNetwork

CONFIG = PoolConfig(
    batch_size=4096, buffer_memory=1 << 20, max_partitions=16, max_processes=8, lock_stripes=4
)


def _answer(sender: Sender, batch: DrainedBatch, error_code: int, base_offset: int) -> None:
    response = ProduceResponse(
        responses=(
            TopicProduceResponse("t", (PartitionProduceResponse(0, error_code, base_offset),)),
        )
    )
    ClientResponse(1, partial(sender.responses.on_produce, [batch]), response, None, 0).complete(0)


@pytest.fixture
def rig(pool_name: str) -> Iterator[tuple[Client, SharedPool, Sender, int]]:
    """An app handle and an in-process Sender on one pool with topic "t" (one partition) and
    producer id 7; no broker: responses are handed to the Sender by the test."""
    handle = Client(
        pool_name, {"bootstrap_servers": ["127.0.0.1:1"]}, pool_config=CONFIG, start_sender=False
    )
    sender_pool = SharedPool.open(pool_name)
    net = MemoryNetwork(Cluster(ClusterConfig()))  # (the test hands responses over itself)
    sender = Sender(sender_pool, SenderConfig(bootstrap_servers=net.bootstrap), network=net)
    try:
        with handle.pool.locks.held(DIRECTORY_LOCK):
            handle.pool.directory.publish({"t": [PartitionLeader(1, 0)]})
        sender_pool.set_producer_identity(7, 0)
        entries = handle.pool.directory.partitions("t")
        assert entries is not None
        yield handle, sender_pool, sender, entries[0].deque_id
    finally:
        # the test owns its pool until it removes it: an idle pool nobody is attached to
        # may be swept by another test's Sender as it starts (cleanup.remove_orphans)
        sender.close()
        handle.close(5)
        sender_pool.destroy()


def _send(sender: Sender, deque_id: int, sequence: int) -> DrainedBatch:
    (batch,) = sender.accumulator.drain([deque_id], 1 << 20)
    meta = sender.idempotence.meta(batch, sender.pool.producer_identity())
    assert meta.base_sequence == sequence
    sender.accumulator.finalize(batch, meta)
    sender.idempotence.sent(batch, meta, 1)
    sender.accumulator.mark_in_flight(batch)
    return sender.accumulator.refresh(batch)


def test_split_halves_complete_the_original_futures(
    rig: tuple[Client, SharedPool, Sender, int],
) -> None:
    handle, sender_pool, sender, deque_id = rig
    futures = [handle.send("t", b"value-%d" % i, b"k", partition=0) for i in range(10)]
    original = _send(sender, deque_id, 0)
    _answer(sender, original, 10, -1)  # MESSAGE_TOO_LARGE

    halves = [sender_pool.batches.read(b) for b in sender_pool.deques.batch_ids(deque_id)]
    assert [h.record_count for h in halves] == [5, 5]
    assert [h.state for h in halves] == [SEALED, SEALED]
    assert {(h.parent_batch, h.parent_generation) for h in halves} == {
        (original.batch_id, original.info.generation)
    }
    assert [h.parent_delta for h in halves] == [0, 5]
    # the halves take the parent's range, under the same producer id and epoch (as Java)
    assert [h.base_sequence for h in halves] == [0, 5]
    assert [(h.producer_id, h.producer_epoch) for h in halves] == [(7, 0), (7, 0)]
    assert not any(f.is_done for f in futures)
    assert not sender.idempotence.reset_pending and sender.idempotence.reset_due() is False
    assert sender_pool.producer_identity() == (7, 0)
    assert sender_pool.deques.next_sequence(deque_id) == 10

    _answer(sender, _send(sender, deque_id, 0), 0, 100)
    _answer(sender, _send(sender, deque_id, 5), 0, 200)
    assert [f.get(5).offset for f in futures] == [100, 101, 102, 103, 104, 200, 201, 202, 203, 204]
    deadline = time.monotonic() + 5
    while sender_pool.buffers.free_slabs() != CONFIG.num_slabs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sender_pool.buffers.free_slabs() == CONFIG.num_slabs
    assert sender_pool.check_invariants() == []


def test_a_single_record_too_large_fails_with_the_broker_error(
    rig: tuple[Client, SharedPool, Sender, int],
) -> None:
    handle, _, sender, deque_id = rig
    future = handle.send("t", b"x" * 100, partition=0)
    _answer(sender, _send(sender, deque_id, 0), 10, -1)
    with pytest.raises(for_code(10), match="MessageSizeTooLargeError"):
        future.get(5)


def test_unknown_topic_times_out_after_max_block_ms(pool_name: str) -> None:
    from shmkafka.errors import KafkaTimeoutError

    handle = Client(
        pool_name,
        {"bootstrap_servers": ["127.0.0.1:1"]},
        pool_config=CONFIG,
        start_sender=False,  # nobody answers the topic request
        max_block_ms=300,
    )
    owner = SharedPool.open(pool_name)  # the test's until it removes it (see rig)
    try:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="'nowhere' not present in metadata"):
            handle.send("nowhere", b"v")
        assert 0.29 <= time.monotonic() - started < 2
        assert handle.pool.directory.requested_topics() == ["nowhere"]  # asked the Sender
    finally:
        handle.close(1)
        owner.destroy()
