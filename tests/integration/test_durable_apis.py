"""A durable pool (``pool_dir``, ``pool_durability``) on every API, against Tansu: each sends
through ``flush`` and ``sync`` pools as through a memory one, every record is read back once
by confluent-kafka's consumer, and the pool's commits show the mode at work. (What a durable
pool keeps through a power cut is tests/powercut's.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from shmkafka.pool.stat import pool_stat
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

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
