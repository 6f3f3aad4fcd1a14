"""A record the C entry tried and left (nothing written) goes, with C's verdict, into one
Python path that never tries C again (entry.py's Verdict, client.py's ``_send_left``): the C
append takes a lock once per such record, counted through the lock validator's hook, which
the C append tells of every take with its call site (shm/lockdep.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from shmkafka import KafkaProducer, Producer
from shmkafka.aiokafka import AIOKafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.producer.entry import VERDICT_BUSY, VERDICT_RESOLVE, verdict_of
from shmkafka.shm import lockdep
from shmkafka.shm.layout import PENDING, S_PENDING

pytestmark = pytest.mark.usefixtures("pool_removed")

BIG = b"v" * 1500  # (a batch of its own: batch_max_records=1)
RECORDS = 20


@pytest.fixture
def c_takes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The call sites of the C append's lock takes, from producers made from now on."""
    sites: list[str] = []
    real = lockdep.PoolLockHook.acquiring

    def counted(self: lockdep.PoolLockHook, index: int, site: str) -> None:
        sites.append(site.split(" ")[0])
        real(self, index, site)

    monkeypatch.setattr(lockdep, "ENABLED", True)
    monkeypatch.setattr(lockdep.PoolLockHook, "acquiring", counted)
    yield sites


def test_the_verdict_names_the_partition_and_what_it_needs() -> None:
    assert verdict_of(3) == (3, True)
    assert verdict_of(VERDICT_BUSY - 3) == (3, False)
    assert verdict_of(VERDICT_RESOLVE) == (None, False)


def _allocating(producer: Any) -> Any:
    """What marks the process slot's allocation pending, as another thread of the process
    does while it allocates: the C append then leaves a new batch to Python (before it
    takes the pool lock), which allocates (and overwrites the mark)."""
    client = producer.shmkafka_client
    assert client is not None
    pool = client.pool
    at = pool.layout.slot_at(pool.slot) + S_PENDING
    return lambda: PENDING.pack_into(pool.segment.buf, at, 0, 0)


def _one_c_take_per_record(sites: list[str], send: Any, flush: Any, producer: Any) -> None:
    send(b"warm")  # (the first record of a topic takes Python's path: no route yet)
    flush(10)
    mark = _allocating(producer)
    sites.clear()
    for i in range(RECORDS):
        mark()
        send(b"k%d" % i)
    assert sites == ["fast_append"] * RECORDS  # the entry's one try; no take_run, no second


def test_kafka_python_new_batch(c_takes: list[str], pool_name: str) -> None:
    with BrokerStub(partitions=2) as stub, KafkaProducer(
        bootstrap_servers=stub.bootstrap, pool=pool_name, batch_size=1024, batch_max_records=1,
    ) as producer:  # fmt: skip
        futures = []
        _one_c_take_per_record(
            c_takes, lambda key: futures.append(producer.send("t", BIG, key=key)), producer.flush,
            producer,
        )  # fmt: skip
        producer.flush(10)
        assert all(f.succeeded() for f in futures)


def test_confluent_new_batch(c_takes: list[str], pool_name: str) -> None:
    with BrokerStub(partitions=2) as stub:
        producer = Producer({"bootstrap.servers": stub.bootstrap, "shmkafka.pool": pool_name,
                             "batch.size": 1024, "batch.num.messages": 1})  # fmt: skip
        reports: list[Any] = []
        _one_c_take_per_record(
            c_takes,
            lambda key: producer.produce("t", BIG, key, on_delivery=lambda e, m: reports.append(e)),
            producer.flush,
            producer,
        )
        assert producer.flush(10) == 0
        producer.close()
    assert reports == [None] * (RECORDS + 1)


def test_aiokafka_new_batch(c_takes: list[str], pool_name: str) -> None:
    async def run(bootstrap: str) -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, pool=pool_name,
                                    max_batch_size=1024, batch_max_records=1)  # fmt: skip
        await producer.start()
        try:
            futures = [await producer.send("t", BIG, key=b"warm")]
            mark = _allocating(producer)
            c_takes.clear()
            for i in range(RECORDS):
                mark()
                futures.append(await producer.send("t", BIG, key=b"k%d" % i))
            assert c_takes == ["fast_append"] * RECORDS
            return list(await asyncio.wait_for(asyncio.gather(*futures), 10))
        finally:
            await producer.stop()

    with BrokerStub(partitions=2) as stub:
        assert len(asyncio.run(run(stub.bootstrap))) == RECORDS + 1


def test_a_busy_stripe_sends_the_record_to_python_once(c_takes: list[str], pool_name: str) -> None:
    """Another thread of the process holds the record's stripe: the C append sees it at
    once (BUSY), and the Python path waits for the stripe, without a second C try."""
    with BrokerStub(partitions=1) as stub, KafkaProducer(
        bootstrap_servers=stub.bootstrap, pool=pool_name
    ) as producer:  # fmt: skip
        producer.send("t", b"warm", key=b"k").get(10)
        client = producer.shmkafka_client
        assert client is not None
        (entry,) = client.partitions("t") or ()
        stripe = client.pool.layout.stripe_lock(entry.deque_id)
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with client.pool.locks.held(stripe):
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(10)
        c_takes.clear()
        threading.Timer(0.2, release.set).start()
        started = time.monotonic()
        future = producer.send("t", b"v", key=b"k")
        waited = time.monotonic() - started
        holder.join(10)
        assert c_takes == ["fast_append"]
        assert waited >= 0.15  # it waited for the stripe in Python's blocking lock
        assert future.get(10).offset == 1
