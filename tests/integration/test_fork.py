"""A producer made before fork works in the children: gunicorn-style preforking with
os.fork, and multiprocessing's spawn and forkserver (the producer is pickled as its
arguments). Every record is read back exactly once, in order per process."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from shmkafka import KafkaProducer, Producer
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

PARTITIONS = 4
pytestmark = pytest.mark.usefixtures("pool_removed")
PER_CHILD = 500


@pytest.fixture
def topic(tansu: Peer) -> str:
    name = unique_topic("fork")
    with cluster(tansu) as c:
        c.ensure_topic(name, PARTITIONS)
    return name


def child_sends(producer: KafkaProducer, topic: str, child: int) -> bool:
    futures = [
        producer.send(topic, b"%d-%d" % (child, i), key=b"child-%d" % child)
        for i in range(PER_CHILD)
    ]
    producer.flush(60)
    offsets = [f.get(0).offset for f in futures]
    producer.close(10)
    return offsets == sorted(offsets) and len(set(offsets)) == PER_CHILD


def _child_main(producer: KafkaProducer, topic: str, child: int) -> None:
    if not child_sends(producer, topic, child):
        raise SystemExit(1)


def _check_read_back(tansu: Peer, topic: str, children: int, extra: list[bytes]) -> None:
    got = consume_all(tansu, topic, list(range(PARTITIONS)), children * PER_CHILD + len(extra))
    values = [m.value() for m in got]
    assert len(values) == len(set(values)) == children * PER_CHILD + len(extra)
    for child in range(children):
        mine = sorted((m.offset(), m.value()) for m in got if m.key() == b"child-%d" % child)
        assert [v for _, v in mine] == [b"%d-%d" % (child, i) for i in range(PER_CHILD)]
    assert set(extra) <= set(values)


@pytest.mark.catalogue(12)
def test_gunicorn_style_prefork(tansu: Peer, topic: str, pool_name: str) -> None:
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=5)
    producer.send(topic, b"parent-before", key=b"parent").get(30)  # threads running at fork
    pids = []
    for child in range(4):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's verdict is its exit status
            try:
                os._exit(0 if child_sends(producer, topic, child) else 1)
            except BaseException:  # noqa: BLE001 - a child never returns into pytest
                os._exit(2)
        pids.append(pid)
    statuses = [os.waitpid(pid, 0)[1] for pid in pids]
    assert [os.waitstatus_to_exitcode(s) for s in statuses] == [0, 0, 0, 0]
    producer.send(topic, b"parent-after", key=b"parent").get(30)  # the parent still works
    producer.close(10)
    _check_read_back(tansu, topic, 4, [b"parent-before", b"parent-after"])


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_multiprocessing_children_use_a_pickled_producer(
    tansu: Peer, topic: str, pool_name: str, method: str
) -> None:
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=5)
    ctx = mp.get_context(method)
    children = [ctx.Process(target=_child_main, args=(producer, topic, c)) for c in range(3)]
    for c in children:
        c.start()
    for c in children:
        c.join(120)
    assert [c.exitcode for c in children] == [0, 0, 0]
    producer.close(10)
    _check_read_back(tansu, topic, 3, [])


def test_confluent_producer_after_fork(tansu: Peer, topic: str, pool_name: str) -> None:
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
                         "partitioner": "murmur2_random"})  # fmt: skip
    producer.produce(topic, b"parent", b"parent")
    assert producer.flush(30) == 0
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        try:
            delivered: list[int] = []
            for i in range(PER_CHILD):
                producer.produce(topic, b"0-%d" % i, b"child-0",
                                 on_delivery=lambda e, m: delivered.append(m.offset()))  # fmt: skip
            left = producer.flush(60)
            producer.close()
            ok = left == 0 and len(delivered) == PER_CHILD and delivered == sorted(delivered)
            os._exit(0 if ok else 1)
        except BaseException:  # noqa: BLE001 - a child never returns into pytest
            os._exit(2)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    producer.close()
    _check_read_back(tansu, topic, 1, [b"parent"])
