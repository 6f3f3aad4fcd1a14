"""shmkafka's AIOKafkaProducer: a ``send_and_wait`` that waits says so in the process's
slot, so the Sender wakes the process at once (pool/result_wakes.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from shmkafka.aiokafka import AIOKafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.producer.process_slot import joined_pools
from shmkafka.shm.layout import S_AWAITING

pytestmark = pytest.mark.usefixtures("pool_removed")


def _awaiting() -> int:
    (pool,) = joined_pools()
    return int(pool.segment.halfwords[(pool.layout.slot_at(pool.slot) + S_AWAITING) >> 2])


def test_send_and_wait_raises_the_awaiting_flag_while_it_waits(pool_name: str) -> None:
    async def run(bootstrap: str) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, pool=pool_name,
                                    linger_ms=60_000)  # fmt: skip
        await producer.start()
        try:
            waiting = asyncio.ensure_future(producer.send_and_wait("t", b"v"))
            deadline = time.monotonic() + 5
            while not (joined_pools() and _awaiting()):  # (it lingers for a minute)
                assert time.monotonic() < deadline, "the waiting send_and_wait never said so"
                await asyncio.sleep(0.001)
            await producer.flush()
            metadata = await asyncio.wait_for(waiting, 10)
            assert metadata.offset == 0 and _awaiting() == 0
        finally:
            await asyncio.wait_for(producer.stop(), 10)

    with BrokerStub(partitions=1) as stub:
        asyncio.run(run(stub.bootstrap))
