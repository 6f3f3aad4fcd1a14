"""results.py's hand-over of a batch result: with nobody waiting on the client's condition
(a paced app's every result) it is not notified at all. (That a waiter is woken, every
test that waits on a future's ``get`` shows.)"""

from __future__ import annotations

import time
from typing import Any

import pytest

from shmkafka import KafkaProducer
from shmkafka.broker_stub.server import BrokerStub

pytestmark = pytest.mark.usefixtures("pool_removed")


def _count_notifies(cond: Any) -> list[int]:
    calls = [0]
    notify_all = cond.notify_all

    def counted() -> None:
        calls[0] += 1
        notify_all()

    cond.notify_all = counted
    return calls


def test_a_result_notifies_only_when_someone_waits(pool_name: str) -> None:
    stub = BrokerStub(partitions=1)
    with stub, KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name) as producer:
        producer.send("t", b"warm").get(10)  # (the topic known, the completion thread up)
        cond = producer._handle._cond
        calls = _count_notifies(cond)
        futures = [producer.send("t", b"%d" % i) for i in range(20)]
        deadline = time.monotonic() + 10  # (nobody waits on the condition: poll, bounded)
        while not all(f.is_done for f in futures):
            assert time.monotonic() < deadline, "results did not come"
            time.sleep(0.005)
        assert calls[0] == 0 and all(f.succeeded() for f in futures)
