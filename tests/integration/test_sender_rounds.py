"""On the 3-node mock cluster: each round sends at most one produce request per node, with
at most one batch per partition."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from shmkafka.producer.accumulator import RecordAccumulator
from shmkafka.producer.settings import SenderConfig
from shmkafka.protocol.messages import ProduceRequest
from shmkafka.sender.sender import Sender
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.layout import DIRECTORY_LOCK
from shmkafka.shm.pool import SharedPool
from tests.peers import Peer

pytestmark = pytest.mark.integration


def now() -> int:
    return int(time.monotonic() * 1000)


def test_one_request_per_node_per_round(mock_cluster: Peer, pool_name: str) -> None:
    app = SharedPool.open(pool_name, PoolConfig(batch_size=1024, buffer_memory=1 << 20))
    sender_pool = SharedPool.open(pool_name)
    bootstrap = tuple(f"{h}:{p}" for h, p in mock_cluster.brokers)
    sender = Sender(sender_pool, SenderConfig(bootstrap_servers=bootstrap, linger_ms=0))
    try:
        # The mock cluster picks each partition's leader at random: a 4-partition topic has
        # all of them on one node 1 time in 27. Such a topic proves nothing here, so take
        # the first of a few topics whose partitions spread over nodes.
        for attempt in range(6):
            topic = f"rounds-{attempt}"
            partitions = _discover(app, sender, sender_pool, topic)
            leaders = {e.leader for e in partitions}
            if len(leaders) > 1:
                break
        assert len(leaders) > 1, partitions  # the partitions really spread over nodes
        acc = RecordAccumulator(app)
        for p in range(len(partitions)):
            for _ in range(12):  # about three 1 KiB batches per partition
                acc.append(topic, p, 1, b"k", bytes(200), now_ms=now())
        sent: list[tuple[int, ProduceRequest]] = []
        original = sender.network.send

        def spy(node: int, request: Any, *args: Any, **kwargs: Any) -> int:
            if isinstance(request, ProduceRequest):
                sent.append((node, request))
            return original(node, request, *args, **kwargs)

        sender.network.send = spy  # type: ignore[method-assign]
        rounds = 0
        while acc.partition_states() or any(sender.in_flight.values()):
            before = len(sent)
            sender.run_once(now())
            this_round = sent[before:]
            per_node = Counter(node for node, _ in this_round)
            assert all(count == 1 for count in per_node.values()), per_node
            for _, request in this_round:
                (topic,) = request.topic_data
                indexes = [p.index for p in topic.partition_data]
                assert len(indexes) == len(set(indexes))  # one batch per partition
            rounds += 1
            assert rounds < 500
        assert {node for node, _ in sent} == leaders
        assert sum(len(r.topic_data[0].partition_data) for _, r in sent) >= 3 * len(partitions)
    finally:
        sender.close()
        sender_pool.detach()
        app.destroy()


def _discover(app: SharedPool, sender: Sender, sender_pool: SharedPool, topic: str) -> Any:
    with app.locks.held(DIRECTORY_LOCK):
        app.directory.request_topic(topic)
    deadline = time.monotonic() + 10
    while app.directory.partitions(topic) is None or sender_pool.producer_identity()[0] < 0:
        sender.run_once(now())
        assert time.monotonic() < deadline
    return app.directory.partitions(topic)
