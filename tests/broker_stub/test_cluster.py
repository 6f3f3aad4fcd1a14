"""broker_stub's log semantics without a network: offsets, high watermark, leader epochs,
truncation on restart (KIP-101's high-watermark truncation loss and its leader-epoch fix),
validation and idempotent de-duplication."""

from __future__ import annotations

from typing import Any

import pytest

from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.broker_stub.log import PartitionLog, StoredBatch
from shmkafka.broker_stub.validate import check_sequence, split_batches
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.records import BatchMeta, build_batch, decode_batch, decode_batch_header
from tests.integration.kafka_io import transactional_batch


def _batch(count: int = 1, *, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    meta = BatchMeta(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    return build_batch([(1000 + i, b"k", b"v%d" % i, []) for i in range(count)], meta)


def _append(cluster: Cluster, topic: str, data: bytes, now: int = 0) -> int:
    p = cluster.topics[topic][0]
    ((header, raw),) = split_batches(data)  # type: ignore[misc]
    stored = p.leader_log.append_as_leader(raw, header, p.leader_epoch, None)
    cluster.record_append(p, stored, None, now)
    return stored.base_offset


def test_offsets_hw_and_reads() -> None:
    log = PartitionLog()
    for count in (3, 2):
        ((header, raw),) = split_batches(_batch(count))  # type: ignore[misc]
        log.append_as_leader(raw, header, 0, None)
    assert log.leo == 5 and [b.base_offset for b in log.batches] == [0, 3]
    assert log.read(0, 1 << 20, upto=3) == log.batches[0].data  # below the HW only
    assert decode_batch(log.read(4, 1, upto=5)).header.base_offset == 3  # whole batches
    assert log.read(5, 1 << 20, upto=5) == b""


def test_followers_copy_with_lag_and_the_hw_is_the_isr_minimum() -> None:
    cluster = Cluster(ClusterConfig(nodes=3, replication_factor=3, replication_lag_ms=100))
    cluster.create_topic("t", 1)
    p = cluster.topics["t"][0]
    _append(cluster, "t", _batch(4), now=0)
    cluster.replicate(50)
    assert p.leader_log.hw == 0  # followers have not fetched yet: acks=all must wait
    assert not cluster.acked(p, 3)
    cluster.replicate(100)
    assert [p.logs[r].leo for r in p.replicas] == [4, 4, 4]
    assert p.leader_log.hw == 4 and cluster.acked(p, 3)
    follower = p.logs[p.replicas[1]]
    assert follower.hw == 0  # a follower learns the HW one fetch later
    cluster.replicate(200)
    assert follower.hw == 4


@pytest.mark.parametrize(("mode", "survives"), [("hw", False), ("epoch", True)])
def test_acked_records_and_truncation_on_restart(mode: str, survives: bool) -> None:
    """KIP-101: B has m1 and m2 and the leader acked them, but B's own HW still
    says 0. B restarts; A dies before B fetches again; B leads. Truncating at the HW loses
    the acked records, truncating by leader epoch keeps them."""
    cluster = Cluster(ClusterConfig(nodes=2, replication_factor=2, truncate_on_restart=mode))
    cluster.create_topic("t", 1)
    p = cluster.topics["t"][0]
    a, b = p.replicas
    _append(cluster, "t", _batch(2))
    cluster.replicate(0)
    assert cluster.acked(p, 1) and p.logs[b].hw == 0  # acked; B's HW is stale
    cluster.kill_node(b)
    cluster.restart_node(b)
    cluster.kill_node(a)
    assert p.leader == b and p.leader_epoch >= 1
    assert (p.leader_log.leo == 2) is survives


def test_a_replica_restarted_behind_is_not_elected_over_acknowledged_records() -> None:
    """A replica restarted behind the high watermark rejoins the ISR only once caught up:
    in it at once (as it was), it was elected when the others went, and the acknowledged
    records were lost (the hosts run: a node restarted, then the leader fenced)."""
    cluster = Cluster(ClusterConfig(nodes=3, replication_factor=3, min_insync_replicas=2))
    cluster.create_topic("t", 1)
    p = cluster.topics["t"][0]
    a = p.leader
    b, c = (r for r in p.replicas if r != a)
    cluster.kill_node(c)
    _append(cluster, "t", _batch(2))
    cluster.replicate(0)
    assert cluster.acked(p, 1) and p.logs[c].leo == 0
    cluster.restart_node(c)  # behind: none of the 2 acknowledged records
    assert c not in p.isr
    cluster.kill_node(b)
    cluster.kill_node(a)
    assert p.leader != c  # no replica left that has them: no leader, not a stale one
    cluster.restart_node(b)
    assert p.leader == b and p.leader_log.leo == 2
    cluster.replicate(0)
    assert c in p.isr and p.logs[c].leo == 2  # caught up: in sync again


def test_a_new_leader_truncates_a_diverged_follower_by_epoch() -> None:
    cluster = Cluster(ClusterConfig(nodes=2, replication_factor=2, replication_lag_ms=10_000))
    cluster.create_topic("t", 1)
    p = cluster.topics["t"][0]
    a = p.replicas[0]
    _append(cluster, "t", _batch(1))  # only A has it (B lags)
    cluster.kill_node(a)  # B leads with an empty log, epoch 1
    _append(cluster, "t", _batch(3))
    cluster.restart_node(a)  # A's offset 0 (epoch 0) diverges: cut at epoch 0's end
    assert p.logs[a].leo == 0
    cluster.config.replication_lag_ms = 0
    cluster.replicate(0)
    assert p.logs[a].leo == 3 and p.leader_log.hw == 3


def test_validation_refuses_corrupt_batches() -> None:
    good = bytearray(_batch(2))
    assert isinstance(split_batches(bytes(good)), list)
    good[-1] ^= 0xFF  # a record byte: the CRC no longer matches
    assert split_batches(bytes(good)) == ErrorCode.CORRUPT_MESSAGE
    assert split_batches(_batch(1)[:-3]) == ErrorCode.CORRUPT_MESSAGE  # truncated
    wrong_magic = bytearray(_batch(1))
    wrong_magic[16] = 1
    assert split_batches(bytes(wrong_magic)) == ErrorCode.CORRUPT_MESSAGE


def test_idempotent_sequences() -> None:
    log = PartitionLog()

    def send(seq: int, count: int = 2, epoch: int = 0) -> tuple[int, int]:
        data = _batch(count, pid=7, epoch=epoch, seq=seq)
        header = decode_batch_header(data)
        code, at = check_sequence(log, header)
        if code == 0:
            log.append_as_leader(data, header, 0, None)
        return code, at

    assert send(3) == (ErrorCode.UNKNOWN_PRODUCER_ID, -1)  # a new producer starts at 0
    assert send(0) == (0, -1)
    assert send(2) == (0, -1)
    assert send(0) == (ErrorCode.DUPLICATE_SEQUENCE_NUMBER, 0)  # answered with its first offset
    assert send(2) == (ErrorCode.DUPLICATE_SEQUENCE_NUMBER, 2)
    assert send(6) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)  # a gap
    assert send(4, epoch=1) == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        -1,
    )  # a new epoch restarts at 0
    assert send(0, epoch=1) == (0, -1)
    assert send(2, epoch=0) == (ErrorCode.INVALID_PRODUCER_EPOCH, -1)  # fenced
    for seq in range(2, 14, 2):  # only the last five batches are remembered
        assert send(seq, epoch=1) == (0, -1)
    assert send(0, epoch=1) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)


def test_a_topic_grows_and_keeps_its_size_across_a_restart(tmp_path: Any) -> None:
    config = ClusterConfig(nodes=3, replication_factor=2, storage_dir=str(tmp_path))
    cluster = Cluster(config)
    cluster.create_topic("t", 2)
    assert cluster.add_partitions("t", 2) == ErrorCode.INVALID_PARTITIONS  # not larger
    assert cluster.add_partitions("nope", 3) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert cluster.add_partitions("t", 5) == 0
    parts = cluster.topics["t"]
    assert [p.index for p in parts] == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 2 and p.leader in p.replicas for p in parts)
    _append(cluster, "t", _batch(3))
    for log in cluster.disk_logs():
        log.close()
    recovered = Cluster(config)
    assert len(recovered.topics["t"]) == 5
    assert recovered.topics["t"][0].leader_log.leo == 3
    for log in recovered.disk_logs():
        log.close()


def test_a_follower_forgets_an_old_epochs_batches_as_the_leader_does() -> None:
    """Found by the soak: a follower kept the old epoch's batches when a new epoch's
    arrived, so once leader it answered the new epoch's batch with sequence N as a
    duplicate of the old epoch's N (and dropped it: a committed transaction not written)."""
    follower = PartitionLog()
    for offset, (epoch, seq) in enumerate([(4, 0), (4, 1), (4, 2), (5, 0)]):
        follower.append_replica(StoredBatch(offset, offset, 0, 0, b""), (1002, epoch, seq, seq))
    ((header, _),) = split_batches(transactional_batch(b"v", 1002, 5, 1))
    assert check_sequence(follower, header) == (0, -1)  # new: epoch 5's first sequence 1
