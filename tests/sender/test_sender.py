"""The Sender on an in-memory broker (memnet.py): the clock is stepped, ``run_once`` is
called, and the requests and responses are asserted — no sockets, no threads, no sleeps."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.errors import KafkaTimeoutError
from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer import results
from shmkafka.producer.client import Client
from shmkafka.protocol.clock import ManualClock, monotonic_ms
from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.messages import ProduceRequest
from shmkafka.protocol.records import decode_batch
from shmkafka.sender.compressors import Compressors
from shmkafka.sender.sender import Sender
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK
from shmkafka.shm.rings import Completion
from tests.appending import append
from tests.conftest import discard
from tests.sender.memnet import MemoryNetwork

CONFIG = PoolConfig(batch_size=1024, buffer_memory=1 << 20, max_partitions=16, max_processes=8)


@dataclass
class Rig:
    handle: Client
    sender: Sender
    net: MemoryNetwork
    clock: ManualClock
    cluster: Cluster

    def round(self, advance_ms: int = 1) -> None:
        # Producers stamp batches with the real monotonic clock: the Sender's clock steps
        # from there, never behind it (on a loaded machine the rig's setup takes a while).
        self.clock.now_ms = max(self.clock.now_ms, monotonic_ms())
        self.sender.run_once(self.clock.advance(advance_ms))

    def until(self, done: Callable[[], bool], advance_ms: int = 1, rounds: int = 500) -> None:
        for _ in range(rounds):
            if done():
                return
            self.round(advance_ms)
        assert done(), f"not done after {rounds} rounds"

    def partitions(self, topic: str) -> list[PartitionLeader]:
        self.handle.topics.request(topic)
        self.until(
            lambda: (
                self.handle.pool.directory.partitions(topic) is not None
                and self.sender.pool.producer_identity()[0] >= 0
            ),
            advance_ms=10,
        )
        return list(self.handle.pool.directory.partitions(topic) or ())

    def produce_requests(self) -> list[tuple[int, ProduceRequest]]:
        return [(n, r) for n, r in self.net.sent if isinstance(r, ProduceRequest)]


@pytest.fixture
def make_rig(pool_name: str) -> Iterator[Callable[..., Rig]]:
    made: list[tuple[Sender, SharedPool, Client]] = []

    def make(
        nodes: int = 1, topics: dict[str, tuple[int, int]] | None = None, **config: Any
    ) -> Rig:
        cluster = Cluster(ClusterConfig(nodes=nodes))
        for name, (partitions, replicas) in (topics or {"t": (1, 1)}).items():
            assert cluster.create_topic(name, partitions, replicas) == 0
        net = MemoryNetwork(cluster, request_timeout_ms=config.get("request_timeout_ms", 30_000))
        clock = ManualClock(monotonic_ms())  # app processes stamp batches with the real one
        handle = Client(pool_name, {}, pool_config=CONFIG, start_sender=False)
        sender_pool = SharedPool.open(pool_name)
        settings = SenderConfig(bootstrap_servers=net.bootstrap, **config)
        sender = Sender(sender_pool, settings, network=net, clock=clock)
        made.append((sender, sender_pool, handle))
        return Rig(handle, sender, net, clock, cluster)

    yield make
    for sender, sender_pool, handle in made:
        sender.close()
        sender_pool.detach()
        discard(handle)


def test_one_request_per_node_per_round(make_rig: Callable[..., Rig]) -> None:
    """Each round sends at most one produce request per node, with at most one batch per
    partition (moved here from the mock-cluster test that wrapped ``network.send``)."""
    rig = make_rig(nodes=3, topics={"rounds": (6, 1)}, linger_ms=0)
    partitions = rig.partitions("rounds")
    leaders = {e.leader for e in partitions}
    assert len(leaders) > 1, partitions  # the partitions really spread over nodes
    acc = RecordAccumulator(rig.handle.pool)
    for p in range(len(partitions)):
        for _ in range(12):  # about three 1 KiB batches per partition
            append(acc, "rounds", p, 1, b"k", bytes(200), now_ms=rig.clock.now_ms)
    rounds = 0
    while acc.partition_states() or rig.sender.idempotence.any_in_flight():
        before = len(rig.produce_requests())
        rig.round()
        this_round = rig.produce_requests()[before:]
        per_node = Counter(node for node, _ in this_round)
        assert all(count == 1 for count in per_node.values()), per_node
        for _, request in this_round:
            (topic,) = request.topic_data
            indexes = [p.index for p in topic.partition_data]
            assert len(indexes) == len(set(indexes))  # one batch per partition
        rounds += 1
        assert rounds < 500
    sent = rig.produce_requests()
    assert {node for node, _ in sent} == leaders
    assert sum(len(r.topic_data[0].partition_data) for _, r in sent) >= 3 * len(partitions)


def _delayed_send(rig: Rig) -> Any:
    """A record queued while its leader is unreachable for 20 s, then sent, its response
    held: created at T, sent at T + 20 s."""
    rig.partitions("t")
    rig.net.down.add(1)
    future = rig.handle.send("t", b"v", b"k", partition=0)
    for _ in range(20):
        rig.round(1000)
    assert rig.produce_requests() == []
    rig.net.down.clear()
    rig.net.hold(1)
    rig.round()
    assert len(rig.produce_requests()) == 1
    return future


def test_a_success_arriving_after_the_delivery_timeout_completes_the_record(
    make_rig: Callable[..., Rig],
) -> None:
    """In flight, a batch waits for its response (or the request timeout): the broker wrote
    it, so a success that comes after delivery.timeout.ms is reported as a success."""
    rig = make_rig(linger_ms=0, request_timeout_ms=30_000, delivery_timeout_ms=40_000)
    future = _delayed_send(rig)
    rig.round(20_001)  # 40 s after the record, 20 s after the request
    rig.round()
    assert not future.is_done
    rig.net.release(1)
    rig.round()
    assert future.get(5).offset == 0
    assert len(rig.produce_requests()) == 1 and rig.sender.stats.expired == 0


def test_a_retriable_error_after_the_delivery_timeout_fails_without_retry(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(linger_ms=0, request_timeout_ms=30_000, delivery_timeout_ms=40_000)
    rig.net.faults.fail_produce(ErrorCode.NOT_ENOUGH_REPLICAS)  # retriable
    future = _delayed_send(rig)
    rig.round(20_001)
    rig.net.release(1)
    rig.round()
    with pytest.raises(KafkaTimeoutError, match=r"delivery\.timeout\.ms"):
        future.get(5)
    for _ in range(5):
        rig.round(200)  # past any retry backoff
    assert len(rig.produce_requests()) == 1  # not sent again


def _sent_and_held(rig: Rig, value: bytes) -> Any:
    """One record sent to partition 0 of "t", its answer held by node 1."""
    rig.partitions("t")
    rig.net.hold(1)
    future = rig.handle.send("t", value, b"k", partition=0)
    rig.round()
    return future


def test_a_disconnect_between_two_in_flight_requests(make_rig: Callable[..., Rig]) -> None:
    """Two requests in flight on one connection; the first is answered, then the connection
    drops and the second's response is lost. The second batch is sent again, the broker
    recognises it (same producer id and sequence), and each record is written once."""
    rig = make_rig(linger_ms=0)
    first = _sent_and_held(rig, b"a")
    second = rig.handle.send("t", b"b", b"k", partition=0)
    rig.round()
    assert len(rig.produce_requests()) == 2 and rig.net.in_flight_count() == 2
    rig.net.release(1, count=1)
    rig.net.disconnect(1)
    rig.net.held.clear()
    rig.until(lambda: len(rig.produce_requests()) == 3 and not rig.sender.busy(), advance_ms=20)
    assert (first.get(5).offset, second.get(5).offset) == (0, 1)
    log = rig.cluster.topics["t"][0].leader_log
    assert log.leo == 2  # the resent batch was not written twice
    assert rig.sender.stats.retries == 1


def test_a_leader_moved_between_metadata_and_drain(make_rig: Callable[..., Rig]) -> None:
    """The Sender drains for the leader its metadata names; the partition moved meanwhile:
    NOT_LEADER_OR_FOLLOWER, a metadata refresh, and the batch goes to the new leader."""
    rig = make_rig(nodes=3, topics={"t": (1, 3)}, linger_ms=0)
    (entry,) = rig.partitions("t")
    new_leader = next(n for n in rig.cluster.node_ids if n != entry.leader)
    rig.cluster.move_leader("t", 0, new_leader)
    future = rig.handle.send("t", b"v", b"k", partition=0)
    rig.until(lambda: not rig.sender.busy() and len(rig.produce_requests()) == 2, 20)
    assert future.get(5).offset == 0
    assert [node for node, _ in rig.produce_requests()] == [entry.leader, new_leader]
    (moved,) = rig.handle.pool.directory.partitions("t") or ()
    assert (moved.leader, moved.leader_epoch) == (new_leader, entry.leader_epoch + 1)
    assert rig.sender.stats.retries == 1
    assert rig.cluster.topics["t"][0].leader_log.leo == 1


def test_records_expire_while_no_producer_id_can_be_had(make_rig: Callable[..., Rig]) -> None:
    """The cluster is unreachable from the start (no metadata, no producer id): a queued
    record still fails after delivery.timeout.ms instead of waiting forever."""
    rig = make_rig(linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=1000)
    rig.net.down.add(1)
    with rig.handle.pool.locks.held(DIRECTORY_LOCK):  # as a previous Sender left it
        rig.handle.pool.directory.publish({"t": [PartitionLeader(1, 0)]})
    future = rig.handle.send("t", b"v", b"k", partition=0)
    rig.round(500)
    assert not future.is_done and rig.sender.pool.producer_identity()[0] < 0
    rig.round(1500)  # (the record was stamped by the real clock, a little after ours)
    with pytest.raises(KafkaTimeoutError, match=r"delivery\.timeout\.ms"):
        future.get(5)
    assert rig.net.sent == [] and rig.sender.stats.expired == 1


def test_a_completion_carries_the_senders_view_of_its_batch(
    make_rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: list[Completion] = []
    monkeypatch.setattr(results, "batch_listener", lambda futures, done: heard.append(done))
    rig = make_rig(linger_ms=0, request_timeout_ms=30_000, delivery_timeout_ms=60_000)
    future = _delayed_send(rig)  # created at T, sent at T + 20 s, its response held
    future.add_done_callback(lambda f: None)  # (listened to: the batch result names it)
    rig.round(250)
    rig.net.release(1)
    rig.round()
    assert future.get(5).offset == 0
    (done,) = heard
    assert done.view is not None
    assert done.view.attempts == 1 and done.view.node_id == 1
    assert 20_000 <= done.view.queued_ms < 21_000
    assert 250 <= done.view.request_ms < 1_000


@pytest.mark.parametrize("codec", ["lz4", "snappy", "gzip", "zstd"])
def test_with_compression_threads_a_requests_batches_are_compressed_together(
    make_rig: Callable[..., Rig], codec: str
) -> None:
    """The pieces of every batch of a request are compressed side by side (compressors.py),
    and each batch still reads back whole, its CRC checked, as the broker reads it."""
    rig = make_rig(topics={"z": (4, 1)}, linger_ms=0, compression_type=codec)
    rig.sender.compressors.close()
    rig.sender.compressors = compressors = Compressors(workers=1)
    partitions = rig.partitions("z")
    acc = RecordAccumulator(rig.handle.pool)
    for p in range(len(partitions)):
        for i in range(3):
            append(acc, "z", p, 1, b"%d" % i, b"p%d r%d " % (p, i) * 40, now_ms=rig.clock.now_ms)
    rig.round()
    ((_, request),) = rig.produce_requests()
    (topic,) = request.topic_data
    assert len(topic.partition_data) == 4 and compressors.parallel_batches == 1
    for part in topic.partition_data:
        blob = part.records if not isinstance(part.records, tuple) else b"".join(part.records)
        batch = decode_batch(bytes(blob or b""))  # (its CRC checked)
        assert batch.header.compression == CompressionType.from_name(codec)
        assert [r.value for r in batch.records] == [
            b"p%d r%d " % (part.index, i) * 40 for i in range(3)
        ]
    compressors.close()


def test_a_partition_sends_to_one_node_at_a_time(make_rig: Callable[..., Rig]) -> None:
    """A batch is written by its old leader and its answer held; the leader moves. Nothing
    newer of its partition goes to the new leader until the old one's batch is answered:
    newer batches written meanwhile would push it out of the broker's last five (the
    producer state a broker keeps), and its retry would then be OUT_OF_ORDER, failing a
    written record and resetting the producer (found by the soak: the records of the
    batches behind it written twice, under the new producer id)."""
    rig = make_rig(nodes=2, topics={"t": (1, 2)}, linger_ms=0)
    (entry,) = rig.partitions("t")
    producer = rig.sender.pool.producer_identity()
    old = entry.leader
    new = next(n for n in rig.cluster.node_ids if n != old)
    rig.net.hold(old)
    first = rig.handle.send("t", b"first", b"k", partition=0)
    rig.round()
    assert [node for node, _ in rig.produce_requests()] == [old]
    assert rig.cluster.topics["t"][0].leader_log.leo == 1  # written, its answer held
    rig.cluster.move_leader("t", 0, new)
    rig.sender.metadata.request_update()
    rig.until(lambda: (rig.handle.pool.directory.partitions("t") or [entry])[0].leader == new)
    later = []
    for i in range(8):  # more than the broker's last five, each its own batch
        later.append(rig.handle.send("t", b"later %d" % i, b"k", partition=0))
        rig.round(20)
    assert [node for node, _ in rig.produce_requests()] == [old]  # held behind the first
    rig.net.disconnect(old)  # the first's answer is lost: its fate is unknown
    rig.net.held.clear()
    rig.until(lambda: not rig.sender.busy(), advance_ms=20)
    assert first.get(5).offset == 0  # the new leader recognised it: DUPLICATE_SEQUENCE_NUMBER
    assert [f.get(5).offset for f in later] == list(range(1, 9))
    log = rig.cluster.topics["t"][0].leader_log
    assert log.leo == 9  # each record once
    assert rig.sender.pool.producer_identity() == producer  # no reset
    assert not rig.sender.idempotence.reset_pending


def test_a_batch_failed_as_corrupt_while_encoding_is_never_counted_in_flight(
    make_rig: Callable[..., Rig],
) -> None:
    """A batch whose descriptor is found corrupt as its request is built is failed there:
    the request's answer must not count it as answered too (that took the partition's
    in-flight count below the batches really out, then to -1, and the Sender stayed busy
    for good)."""
    rig = make_rig(linger_ms=0)
    first = _sent_and_held(rig, b"sound")
    second = rig.handle.send("t", b"damaged", b"k", partition=0)
    pool = rig.sender.pool
    (deque_id,) = {s.deque_id for s in rig.sender.accumulator.partition_states()}
    (damaged,) = pool.deques.batch_ids(deque_id)
    info = pool.batches.read(damaged)  # a record count larger than its bytes can hold
    pool.batches.publish(damaged, info.write_pos, 1 << 20, info.max_timestamp, info.created_ms)
    rig.round()
    with pytest.raises(KafkaError, match="corrupt"):
        second.get(5)
    assert rig.sender.stats.errors == 1
    assert rig.sender.idempotence.in_flight[deque_id] == 1  # the first, still out
    rig.net.release(1)
    rig.until(lambda: not rig.sender.busy())
    assert first.get(5).offset == 0
    assert rig.sender.idempotence.in_flight[deque_id] == 0
