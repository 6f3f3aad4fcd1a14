"""Idle topics retired by the Sender (sender/idle.py) on the in-memory broker: the clock is
stepped past ``metadata_max_idle_ms``, the topic's deques go to the next topic, and a
retired topic comes back, on request, with its sequences."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.client import Client
from shmkafka.protocol.clock import ManualClock, monotonic_ms
from shmkafka.sender.sender import Sender
from shmkafka.shm.config import PoolConfig
from tests.conftest import discard
from tests.sender.memnet import MemoryNetwork

CONFIG = PoolConfig(batch_size=1024, buffer_memory=1 << 20, max_partitions=16, max_processes=8)
IDLE_MS = 1000


class Rig:
    def __init__(self, pool_name: str, topics: dict[str, int], **config: Any) -> None:
        self.cluster = Cluster(ClusterConfig(nodes=1))
        for name, partitions in topics.items():
            assert self.cluster.create_topic(name, partitions, 1) == 0
        self.net = MemoryNetwork(self.cluster)
        self.clock = ManualClock(monotonic_ms())
        self.handle = Client(pool_name, {}, pool_config=CONFIG, start_sender=False)
        self.sender_pool = SharedPool.open(pool_name)
        settings = SenderConfig(
            bootstrap_servers=self.net.bootstrap, linger_ms=0, metadata_max_idle_ms=IDLE_MS,
            **config,
        )  # fmt: skip
        self.sender = Sender(self.sender_pool, settings, network=self.net, clock=self.clock)

    def round(self, advance_ms: int = 1) -> None:
        self.clock.now_ms = max(self.clock.now_ms, monotonic_ms())
        self.sender.run_once(self.clock.advance(advance_ms))

    def until(self, done: Callable[[], bool], advance_ms: int = 10, rounds: int = 500) -> None:
        for _ in range(rounds):
            if done():
                return
            self.round(advance_ms)
        assert done(), f"not done after {rounds} rounds"

    def known(self, topic: str) -> bool:
        return self.handle.pool.directory.partitions(topic) is not None

    def ask(self, topic: str) -> None:
        self.handle.topics.request(topic)
        self.until(lambda: self.known(topic) and self.sender.pool.producer_identity()[0] >= 0)

    def send(self, topic: str, values: list[bytes], partition: int = 0) -> None:
        futures = [self.handle.send(topic, v, None, [], partition, None) for v in values]
        self.round(0)
        self.until(lambda: not self.sender.busy(), advance_ms=1)
        for future in futures:
            future.get(5)  # (the completion thread's part)

    def close(self) -> None:
        self.sender.close()
        self.sender_pool.detach()
        discard(self.handle)


@pytest.fixture
def make_rig(pool_name: str) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(topics: dict[str, int], **config: Any) -> Rig:
        made.append(Rig(pool_name, topics, **config))
        return made[-1]

    yield make
    for rig in made:
        rig.close()


def test_an_idle_topic_gives_its_partitions_to_the_next_topic(make_rig: Callable[..., Rig]) -> None:
    names = [f"busy{i}" for i in range(7)]
    rig = make_rig({"idle": 2, "late": 2, **dict.fromkeys(names, 2)})
    for topic in ["idle", *names]:  # 16 partitions: the pool's max_partitions
        rig.ask(topic)
        rig.send(topic, [b"first"])
    idle_deques = [e.deque_id for e in rig.handle.pool.directory.partitions("idle") or ()]
    began = rig.clock.now_ms
    while rig.known("idle"):  # the others keep sending: only "idle" goes
        for topic in names:
            rig.send(topic, [b"more"])
        rig.round(IDLE_MS // 10)
        assert rig.clock.now_ms - began < 3 * IDLE_MS
    assert rig.clock.now_ms - began >= IDLE_MS
    assert all(rig.known(topic) for topic in names)
    assert "idle" not in rig.handle.pool.directory.snapshot().topics
    rig.ask("late")  # a 17th and 18th partition: fits only in what "idle" gave back
    late = rig.handle.pool.directory.partitions("late") or ()
    assert sorted(e.deque_id for e in late) == sorted(idle_deques)
    assert rig.handle.pool.deques_used() == 16
    rig.send("late", [b"a", b"b"], partition=1)
    assert rig.cluster.topics["late"][1].leader_log.leo == 2
    assert rig.cluster.topics["idle"][0].leader_log.leo == 1  # nothing strayed into it


def test_a_retired_topic_comes_back_with_its_sequences(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig({"t": 1})
    rig.ask("t")
    rig.send("t", [b"0", b"1", b"2"])
    rig.until(lambda: not rig.known("t"), advance_ms=IDLE_MS // 4)
    assert rig.sender.idle.retired == 1
    assert "t" not in rig.sender.metadata.wanted  # a full refresh does not bring it back
    rig.round(rig.sender.config.metadata_max_age_ms + 1)
    rig.round()
    assert not rig.known("t")
    rig.ask("t")
    rig.send("t", [b"3", b"4"])
    log = rig.cluster.topics["t"][0].leader_log
    assert log.leo == 5
    (entry,) = log.producers.values()
    assert [(first, last) for first, last, _ in entry.batches][-1] == (3, 4)


def test_a_topic_with_a_batch_in_flight_is_not_retired(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig({"t": 1})
    rig.ask("t")
    rig.net.hold(1)  # the broker keeps its answer: the batch stays in flight
    future = rig.handle.send("t", b"v", None, [], 0, None)
    for _ in range(12):
        rig.round(IDLE_MS // 4)
    assert rig.known("t") and rig.sender.idle.retired == 0
    rig.net.release(1)
    rig.round()
    assert future.get(5).offset == 0
    rig.until(lambda: not rig.known("t"), advance_ms=IDLE_MS // 4)
