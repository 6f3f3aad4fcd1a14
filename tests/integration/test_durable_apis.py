"""A durable pool (``pool_dir``, ``pool_durability``) on every API, against Tansu: each sends
through ``flush`` and ``sync`` pools as through a memory one, every record is read back once
by confluent-kafka's consumer, and the pool's commits show the mode at work. (What a durable
pool keeps through a power cut is tests/powercut's.)"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.recovery import DELIVERED_RECORDS, FAILED_RECORDS, RECOVERED_RECORDS
from shmkafka.pool.stat import pool_stat
from shmkafka.producer.client import Client
from tests.appending import append
from tests.conftest import SMALL, publish
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer
from tests.powercut.host import _remove_semaphores

pytestmark = pytest.mark.integration
RECORDS = 40


def _commits(pool: str, durable: dict[str, Any]) -> int:
    """The pool's commits so far; it lives in its directory on the disk meanwhile."""
    stat = pool_stat(pool)["durability"]
    assert (stat["mode"], stat["dir"]) == (durable["pool_durability"], durable["pool_dir"])
    assert (Path(durable["pool_dir"]) / f"shmkafka.{pool}").exists()
    return int(stat["commits"])


def _kafka(peer: Peer, pool: str, durable: dict[str, Any], topic: str) -> int:
    from shmkafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=peer.bootstrap, pool=pool,
                             enable_idempotence=True, **durable)  # fmt: skip
    futures = [producer.send(topic, b"%d" % i, partition=0) for i in range(RECORDS)]
    producer.flush(30)
    assert all(f.get(10).offset >= 0 for f in futures)
    commits = _commits(pool, durable)
    producer.close(10)
    return commits


def _confluent(peer: Peer, pool: str, durable: dict[str, Any], topic: str) -> int:
    from shmkafka import Producer

    producer = Producer({
        "bootstrap.servers": peer.bootstrap, "shmkafka.pool": pool, "enable.idempotence": True,
        "shmkafka.pool.dir": durable["pool_dir"],
        "shmkafka.pool.durability": durable["pool_durability"],
    })  # fmt: skip
    errors: list[Any] = []
    for i in range(RECORDS):
        producer.produce(topic, b"%d" % i, partition=0,
                         on_delivery=lambda err, msg: err and errors.append(err))  # fmt: skip
        if i == 0 and durable["pool_durability"] == "sync":
            # the pool did not know the topic: the record waited in the process for its
            # metadata, and produce() returned only once it was in the pool and committed
            assert pool_stat(pool)["durability"]["commits"] >= 1
    assert producer.flush(30) == 0 and errors == []
    return _commits(pool, durable)


def _aiokafka(peer: Peer, pool: str, durable: dict[str, Any], topic: str) -> int:
    from shmkafka.aiokafka import AIOKafkaProducer

    async def run() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=peer.bootstrap, pool=pool,
                                    enable_idempotence=True, **durable)  # fmt: skip
        await producer.start()
        try:
            futures = [await producer.send(topic, b"%d" % i, partition=0) for i in range(RECORDS)]
            results = await asyncio.wait_for(asyncio.gather(*futures), 30)
            assert all(r.offset >= 0 for r in results)
            return _commits(pool, durable)
        finally:
            await producer.stop()

    return asyncio.run(run())


@pytest.mark.parametrize("mode", ["flush", "sync"])
@pytest.mark.parametrize("api", [_kafka, _confluent, _aiokafka], ids=["kafka", "confluent", "aio"])
def test_every_api_sends_through_a_durable_pool(
    tansu: Peer, tmp_path: Path, pool_name: str, mode: str, api: Any
) -> None:
    topic = unique_topic(f"durable-{mode}")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    durable = {"pool_dir": str(tmp_path), "pool_durability": mode}
    commits = api(tansu, pool_name, durable, topic)
    # sync: every send returned once a commit covered it (one process: one commit each);
    # flush: the Sender commits each batch's sequence before it sends it
    assert commits >= (RECORDS if mode == "sync" else 1)
    values = sorted(int(m.value()) for m in consume_all(tansu, topic, [0], RECORDS))
    assert values == list(range(RECORDS))


def test_recovery_after_the_broker_forgot_the_producer_delivers_in_order(
    tansu: Peer, tmp_path: Path, pool_name: str
) -> None:
    """A batch the cut left in flight goes again under its old producer; a broker that
    never knew that producer (or forgot it: producer.id.expiration.ms) refuses it, the
    Sender takes a new producer id and sends it again, and the newer batch of its partition
    waits behind it: both are read back once, in order. (A batch whose acknowledgement the
    cut lost would then be written twice: reliability.md says so.)"""
    topic = unique_topic("recovered-expired")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    config = dataclasses.replace(SMALL, pool_dir=str(tmp_path), pool_durability="flush")
    sender = {"bootstrap_servers": [tansu.bootstrap], "enable_idempotence": True, "acks": -1}
    before = Client(pool_name, sender, pool_config=config, start_sender=False)
    try:
        pool = before.pool
        publish(pool, {topic: 1})
        acc = RecordAccumulator(pool, max_block_ms=100)
        append(acc, topic, 0, 1, None, b"sent before the cut", now_ms=1)
        (state,) = acc.partition_states()
        (batch,) = acc.drain([state.deque_id], 1 << 20)
        pool.batches.set_producer_state(batch.batch_id, 424242, 0, 17)  # (unknown to Tansu)
        acc.mark_in_flight(batch)
        append(acc, topic, 0, 2, None, b"queued at the cut", now_ms=2)
        assert pool.committer is not None
        pool.committer.commit()
    finally:
        before.close(5)
    _remove_semaphores(pool_name)  # (the host went down: only the pool's file is left)
    after = Client(pool_name, sender, pool_config=config)
    try:
        stats = after.pool.recovery_stats
        deadline = time.monotonic() + 60
        while stats()[DELIVERED_RECORDS] + stats()[FAILED_RECORDS] < 2:
            assert time.monotonic() < deadline, stats()
            time.sleep(0.05)
        assert stats()[RECOVERED_RECORDS] == 2 and stats()[FAILED_RECORDS] == 0
        assert after.pool.producer_identity()[0] not in (-1, 424242)
    finally:
        after.close(10)
    read = [m.value() for m in consume_all(tansu, topic, [0], 2)]
    assert read == [b"sent before the cut", b"queued at the cut"]
