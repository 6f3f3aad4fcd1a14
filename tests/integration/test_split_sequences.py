"""Splits and refused batches keep the idempotent producer's sequences (sender/idempotence.py),
against broker_stub (its ``max_message_bytes``) and Tansu (behind tests/integration/
size_proxy.py, which refuses batches above the limit as such a broker would, since Tansu
does not): with idempotence and with a transaction, one response lost on the way.

- A batch above the broker's limit, of records each below it, is split until its halves
  fit: every record is read back once and in order, under one producer id and epoch.
- A record larger than the broker's limit, among small ones: it alone fails
  (MESSAGE_TOO_LARGE), its sequence is given back, and every other record is read back once
  and in order; no record fails with OUT_OF_ORDER_SEQUENCE_NUMBER; no new epoch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from shmkafka import KafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.errors import MessageSizeTooLargeError
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.pool.stat import segment_stat
from tests.integration.kafka_io import consume_all, unique_topic
from tests.integration.size_proxy import SizeProxy
from tests.peers import Peer, run_tansu

pytestmark = pytest.mark.usefixtures("pool_removed")

LIMIT = 20_000  # the broker's max.message.bytes
SMALL = 1_000
COUNT = 120
BOUND_S = 60.0


@dataclass
class Broker:
    produce_to: str  # where producers connect (the proxy, for Tansu)
    reader: Peer  # where the consumer reads back
    lose_produce_responses: Callable[[int], None]
    lost: Callable[[], bool]  # the response to lose was lost


@contextlib.contextmanager
def _broker_stub() -> Iterator[Broker]:
    with BrokerStub(nodes=1, partitions=1, max_message_bytes=LIMIT) as stub:
        host, port = stub.bootstrap.split(":")
        reader = Peer("broker_stub", ((host, int(port)),), True, 1)

        def lose(count: int) -> None:
            stub.faults.drop_connection("after", count=count, api_key=0)

        def lost() -> bool:
            return all(rule.remaining == 0 for rule in stub.faults.drops)

        yield Broker(stub.bootstrap, reader, lose, lost)


@contextlib.contextmanager
def _tansu() -> Iterator[Broker]:
    with run_tansu() as peer, SizeProxy(peer.brokers[0], LIMIT) as proxy:
        yield Broker(proxy.bootstrap, peer, proxy.lose_produce_responses, lambda: proxy.lost == 1)


BROKERS = [pytest.param(_broker_stub, id="broker_stub"), pytest.param(_tansu, id="tansu")]


def _producer(broker: Broker, pool: str, transactional: bool) -> KafkaProducer:
    extra: dict[str, Any] = {"transactional_id": f"split-{pool}"} if transactional else {}
    return KafkaProducer(
        bootstrap_servers=broker.produce_to, pool=pool, enable_idempotence=True,
        linger_ms=200, max_block_ms=30_000, **extra,
    )  # fmt: skip


def _identity(pool: str) -> tuple[int, int]:
    with SharedPool.open(pool) as handle:  # (the test's view of the pool's producer)
        return handle.producer_identity()


def _records_retried(pool: str) -> int:
    with SharedPool.open(pool) as handle:
        retried: int = segment_stat(handle.segment)["sender"]["records_retried"]
        return retried


def _run(
    broker: Broker, pool: str, transactional: bool, values: list[bytes]
) -> tuple[list[Any], tuple[int, int], tuple[int, int]]:
    topic = unique_topic("split")
    producer = _producer(broker, pool, transactional)
    try:
        if transactional:
            producer.init_transactions()
            producer.begin_transaction()
        first = producer.send(topic, b"first", partition=0)
        first.get(BOUND_S)
        before = _identity(pool)
        broker.lose_produce_responses(1)
        futures = [producer.send(topic, value, partition=0) for value in values]
        producer.flush(BOUND_S)
        if transactional:
            failed = [f for f in futures if f.failed()]
            if failed:  # a record failed for good: the transaction cannot commit it
                producer.abort_transaction()
            else:
                producer.commit_transaction()
        after = _identity(pool)
        assert broker.lost(), "no response was lost"
        assert _records_retried(pool) >= len(values) // 2, "nothing split"
    finally:
        producer.close(10)
    return [first, *futures], before, after


@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "transactional"])
@pytest.mark.parametrize("make", BROKERS)
def test_a_batch_above_the_limit_is_split_under_one_epoch(
    make: Any, transactional: bool, pool_name: str
) -> None:
    values = [b"%06d:" % i + b"v" * SMALL for i in range(COUNT)]  # 120 KB: split 3 times
    with make() as broker:
        futures, before, after = _run(broker, pool_name, transactional, values)
        assert all(f.succeeded() for f in futures), [f.exception for f in futures if f.failed()]
        topic = futures[0].get(0).topic
        read = consume_all(broker.reader, topic, [0], COUNT + 1)
    assert after == before  # no new producer id, no new epoch
    assert [m.value() for m in read] == [b"first", *values]  # each once, in order


@pytest.mark.parametrize("make", BROKERS)
def test_a_record_above_the_limit_fails_alone_and_gives_its_sequence_back(
    make: Any, pool_name: str
) -> None:
    values = [b"%06d:" % i + b"v" * SMALL for i in range(COUNT)]
    big = COUNT // 3
    values[big] = b"%06d:" % big + b"B" * (2 * LIMIT)
    with make() as broker:
        futures, before, after = _run(broker, pool_name, False, values)
        outcomes = [f.exception for f in futures]
        assert [i for i, e in enumerate(outcomes) if e is not None] == [big + 1]
        assert isinstance(outcomes[big + 1], MessageSizeTooLargeError)
        topic = futures[0].get(0).topic
        read = consume_all(broker.reader, topic, [0], COUNT)
    assert after == before  # the gap was given back: no new producer id, no new epoch
    assert [m.value() for m in read] == [b"first", *values[:big], *values[big + 1 :]]
