"""A corrupted batch descriptor in shared memory fails that batch with an error but never
crashes the Sender: descriptors are fuzzed with random bytes, over and over, while the
Sender (in this process) produces to broker_stub's handlers (memnet.py)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import pytest

from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.client import Client
from shmkafka.producer.futures import Future
from shmkafka.protocol.clock import monotonic_ms
from shmkafka.protocol.errors import KafkaError
from shmkafka.sender.sender import Sender
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.layout import (
    B_GENERATION,
    B_PARENT,
    D_STICKY,
    DEQUE_HEADER,
    H_TOPIC_REQUESTS,
    H_WAITQ_HEAD,
    TOPIC_REQUEST,
    TOPIC_REQUEST_SLOTS,
)
from tests.conftest import discard
from tests.sender.memnet import MemoryNetwork

CONFIG = PoolConfig(batch_size=4096, buffer_memory=1 << 20, max_partitions=16, max_processes=8)


@pytest.fixture
def rig(pool_name: str) -> Iterator[tuple[Client, Sender, SharedPool]]:
    """An app handle and an in-process Sender on an in-memory broker (memnet.py) with
    topic "t" of two partitions."""
    net = MemoryNetwork(Cluster(ClusterConfig(nodes=1, partitions=2)))
    config = SenderConfig(bootstrap_servers=net.bootstrap, linger_ms=0)
    handle = Client(pool_name, {}, pool_config=CONFIG, start_sender=False)
    sender_pool = SharedPool.open(pool_name)
    sender = Sender(sender_pool, config, network=net)
    try:
        handle.topics.request("t")
        deadline = time.monotonic() + 10
        while handle.pool.directory.partitions("t") is None:
            sender.run_once(monotonic_ms())
            assert time.monotonic() < deadline
        yield handle, sender, sender_pool
    finally:
        sender.close()
        sender_pool.detach()
        discard(handle)


def _run_until_done(sender: Sender, futures: list[Future], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not all(f.is_done for f in futures):
        sender.run_once(monotonic_ms())  # must never raise
        assert time.monotonic() < deadline, "futures did not complete"


def _send_to_both(handle: Client, pool: SharedPool) -> tuple[list[Future], list[Future], int]:
    """20 records to partition 0 (whose structures the test damages) and 20 to partition
    1; returns both futures lists and partition 0's deque id."""
    victims = [handle.send("t", b"v%d" % i, b"k", partition=0) for i in range(20)]
    others = [handle.send("t", b"w%d" % i, b"k", partition=1) for i in range(20)]
    entries = pool.directory.partitions("t")
    assert entries is not None
    return victims, others, entries[0].deque_id


def _others_delivered_victims_typed(
    sender: Sender, victims: list[Future], others: list[Future]
) -> None:
    _run_until_done(sender, victims + others)
    assert all(f.succeeded() for f in others), [f.exception for f in others if f.failed()]
    for f in victims:  # failed with the typed error, or sent if the noise left it valid
        assert f.succeeded() or isinstance(f.exception, KafkaError)


@pytest.mark.catalogue(34)
@pytest.mark.parametrize("seed", range(25))
def test_fuzzed_descriptors_fail_their_batch_only(
    rig: tuple[Client, Sender, SharedPool], seed: int
) -> None:
    handle, sender, pool = rig
    rng = random.Random(seed)
    victims, others, deque_id = _send_to_both(handle, pool)
    (batch_id,) = pool.deques.batch_ids(deque_id)
    at = pool.layout.batch_at(batch_id)
    # Random bytes over the descriptor, but its state and generation (so the futures can be
    # matched to the failure) and the publish fields the appenders wrote last stay.
    start, end = B_GENERATION + 4, B_PARENT + 12
    noise = bytearray(rng.randbytes(end - start))
    for keep in range(24 - start, 48 - start):  # write_pos .. max timestamp: sometimes kept
        if rng.random() < 0.5:
            noise[keep] = pool.segment.buf[at + start + keep]
    pool.segment.buf[at + start : at + end] = bytes(noise)
    _others_delivered_victims_typed(sender, victims, others)
    after = [handle.send("t", b"x", b"k", partition=1) for _ in range(5)]  # the Sender lives on
    _run_until_done(sender, after)
    assert all(f.succeeded() for f in after)


def _region(pool: SharedPool, deque_id: int, name: str) -> tuple[int, int]:
    """(offset, length) of a part of the pool that producer processes write."""
    layout = pool.layout
    if name == "deque":  # its ends, topic and partition, and its batches' links
        at = layout.deque_at(deque_id)
        return at, DEQUE_HEADER.size
    if name == "sticky":
        return layout.deque_at(deque_id) + D_STICKY, 4
    if name == "wait_queue":
        return H_WAITQ_HEAD, 16
    assert name == "topic_requests"
    return layout.topic_requests_at, TOPIC_REQUEST_SLOTS * TOPIC_REQUEST.size


@pytest.mark.catalogue(34)
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("region", ["deque", "sticky", "wait_queue", "topic_requests"])
def test_fuzzed_shared_structures_never_crash_the_sender(
    rig: tuple[Client, Sender, SharedPool], region: str, seed: int
) -> None:
    """Random bytes over what producers write besides descriptors: a damaged deque is
    emptied and its batches failed with the typed error; the other partition, and later
    sends to both, are delivered; nothing is sent twice."""
    handle, sender, pool = rig
    rng = random.Random(seed)
    victims, others, deque_id = _send_to_both(handle, pool)
    at, length = _region(pool, deque_id, region)
    pool.segment.buf[at : at + length] = rng.randbytes(length)
    if region == "topic_requests":
        pool.segment.store_u32(H_TOPIC_REQUESTS, rng.randrange(1 << 32))
    _others_delivered_victims_typed(sender, victims, others)
    after = [handle.send("t", b"x", b"k", partition=p) for p in (0, 1) for _ in range(5)]
    _run_until_done(sender, after)
    assert all(f.succeeded() for f in after), [f.exception for f in after if f.failed()]
    offsets = [f.get(0).offset for f in victims + after[:5] if f.succeeded()]
    assert len(offsets) == len(set(offsets))  # partition 0: no record written twice
