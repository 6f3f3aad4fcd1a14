"""broker_stub's links between nodes, without a network: a follower that cannot reach its
leader does not replicate and leaves the ISR after ``replica_lag_time_max_ms``; a node out
of the quorum for ``session_timeout_ms`` is fenced and its leadership moves; an acks=all
batch is answered by ``ack_state`` (acknowledged, NOT_ENOUGH_REPLICAS_AFTER_APPEND, or
NOT_LEADER_OR_FOLLOWER when the leader changed), and the old leader's unacknowledged
records are gone once it is back."""

from __future__ import annotations

import itertools

from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.protocol.error_codes import ErrorCode
from tests.broker_stub.test_cluster import _append, _batch

ALL = set(itertools.permutations((1, 2, 3), 2))


def _cluster(**config: int) -> Cluster:
    cluster = Cluster(ClusterConfig(nodes=3, replication_factor=3, min_insync_replicas=2,
                                    **config))  # fmt: skip
    cluster.create_topic("t", 1, 3)
    cluster.set_links(ALL, 0)
    return cluster


def _cut(node: int) -> set[tuple[int, int]]:
    return {(a, b) for a, b in ALL if node not in (a, b)}


def test_a_follower_cut_from_its_leader_leaves_the_isr_after_the_lag() -> None:
    cluster = _cluster(replica_lag_time_max_ms=1000)
    p = cluster.topics["t"][0]
    follower = next(r for r in p.replicas if r != p.leader)
    cluster.set_links(ALL - {(follower, p.leader)}, 0)
    last = _append(cluster, "t", _batch(2), now=0) + 1
    cluster.replicate(500)
    assert follower in p.isr and p.logs[follower].leo == 0  # cut: no fetch, still in sync
    assert cluster.ack_state(p, last, p.leader, p.leader_epoch) is None  # the HW waits
    cluster.replicate(1600)
    assert follower not in p.isr  # behind for longer than the lag
    assert cluster.ack_state(p, last, p.leader, p.leader_epoch) == ErrorCode.NONE  # 2 in ISR
    cluster.set_links(ALL, 1700)
    cluster.replicate(1700)
    assert follower in p.isr and p.logs[follower].leo == 2  # caught up: back in sync


def test_an_ack_with_too_few_in_sync_replicas_is_refused_after_append() -> None:
    cluster = _cluster(replica_lag_time_max_ms=1000)
    p = cluster.topics["t"][0]
    followers = [r for r in p.replicas if r != p.leader]
    cluster.set_links({(a, b) for a, b in ALL if p.leader not in (a, b)} | {
        (p.leader, f) for f in followers}, 0)  # fmt: skip
    last = _append(cluster, "t", _batch(1), now=0)
    cluster.replicate(0)
    cluster.replicate(1500)
    assert p.isr == [p.leader] and p.leader_log.hw > last
    assert (cluster.ack_state(p, last, p.leader, p.leader_epoch)
            == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)  # fmt: skip


def test_a_leader_out_of_the_quorum_is_fenced_and_its_leadership_moves() -> None:
    cluster = _cluster(session_timeout_ms=2000)
    p = cluster.topics["t"][0]
    old, epoch = p.leader, p.leader_epoch
    _append(cluster, "t", _batch(1), now=0)
    cluster.replicate(0)
    assert p.leader_log.hw == 1
    cluster.set_links(_cut(old), 100)  # cut from both followers: the others keep their link
    unacked = _append(cluster, "t", _batch(3), now=200) + 2  # appended, never replicated
    cluster.replicate(200)
    cluster.set_links(_cut(old), 2000)
    assert p.leader == old and not cluster.fenced  # not yet: the session has not expired
    cluster.set_links(_cut(old), 2100)
    assert cluster.fenced == {old} and old in cluster.live  # up, answering, leading nothing
    assert p.leader != old and p.leader_epoch == epoch + 1 and old not in p.isr
    assert cluster.ack_state(p, unacked, old, epoch) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.leader_log.leo == 1  # the new leader never had the unacknowledged records
    cluster.set_links(ALL, 3000)  # healed: unfenced, truncated by epoch, then caught up
    assert not cluster.fenced and p.logs[old].leo == 1
    _append(cluster, "t", _batch(1), now=3000)
    cluster.replicate(3000)
    assert old in p.isr and p.logs[old].leo == 2 and p.leader_log.hw == 2


def test_the_majority_side_keeps_its_leaders_when_one_follower_is_cut() -> None:
    cluster = _cluster(session_timeout_ms=2000)
    p = cluster.topics["t"][0]
    leader = p.leader
    follower = next(r for r in p.replicas if r != leader)
    cluster.set_links(_cut(follower), 0)
    cluster.set_links(_cut(follower), 5000)
    assert cluster.fenced == {follower} and p.leader == leader and follower not in p.isr


def test_after_every_node_was_fenced_only_the_last_in_sync_replica_leads() -> None:
    """The last member of an ISR stays in it when it is fenced, so that only it leads the
    partition again: a replica that was behind never does, and no acknowledged record goes
    with a stale leader."""
    cluster = _cluster(session_timeout_ms=1000)
    p = cluster.topics["t"][0]
    stale = next(r for r in p.replicas if r != p.leader)
    cluster.set_links(_cut(stale), 0)
    cluster.set_links(_cut(stale), 1000)
    assert cluster.fenced == {stale}
    last = _append(cluster, "t", _batch(3), now=1000) + 2
    cluster.replicate(1000)
    assert cluster.ack_state(p, last, p.leader, p.leader_epoch) == ErrorCode.NONE
    cluster.set_links(set(), 2000)  # every node cut off from every other
    cluster.set_links(set(), 3000)
    assert cluster.fenced == {1, 2, 3} and p.leader == -1 and len(p.isr) == 1
    (keeper,) = p.isr
    cluster.set_links(ALL, 4000)
    assert not cluster.fenced and p.leader == keeper and p.leader_log.leo == 3
    cluster.replicate(4000)
    assert p.logs[stale].leo == 3 and p.leader_log.hw == 3  # the stale one caught up


def test_a_fenced_node_killed_and_restarted_is_judged_by_its_links_again() -> None:
    cluster = _cluster(session_timeout_ms=1000)
    p = cluster.topics["t"][0]
    node = p.leader
    cluster.set_links(_cut(node), 0)
    cluster.set_links(_cut(node), 1000)
    assert cluster.fenced == {node} and p.leader != node
    cluster.kill_node(node)
    cluster.restart_node(node)
    assert node not in cluster.fenced  # (until its links say otherwise)
    cluster.set_links(_cut(node), 1100)
    cluster.set_links(_cut(node), 2200)
    assert cluster.fenced == {node} and p.leader != node and node not in p.isr
