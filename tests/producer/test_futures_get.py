"""``Future.get()`` from a future's callback, on the completion thread: the thread that
would deliver the awaited result is the one waiting, so the wait reads the ring itself (as
a callback's ``flush()`` does) and returns the result instead of waiting out its timeout,
or for ever without one."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from shmkafka import KafkaProducer
from shmkafka.broker_stub.server import BrokerStub

pytestmark = pytest.mark.usefixtures("pool_removed")


@pytest.mark.parametrize("timeout", [5.0, None])
def test_a_get_from_a_callback_returns_the_other_records_result(
    pool_name: str, timeout: float | None
) -> None:
    seen: list[Any] = []
    with BrokerStub(partitions=1) as stub:
        producer = KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name, linger_ms=5)
        try:

            def on_first(metadata: Any) -> None:
                second = producer.send("t", b"second")
                began = time.monotonic()
                try:
                    seen.append((threading.current_thread().name, second.get(timeout)))
                except Exception as exc:  # noqa: BLE001 - the test reports it
                    seen.append((threading.current_thread().name, exc))
                seen.append(time.monotonic() - began)

            producer.send("t", b"first").add_callback(on_first).get(10)
            deadline = time.monotonic() + 10
            while len(seen) < 2:
                assert time.monotonic() < deadline, "the callback's get() did not return"
                time.sleep(0.005)
        finally:
            producer.close(timeout=10)
    (thread, result), waited = seen
    assert thread == "shmkafka-completions"  # (the case: the callback ran on that thread)
    assert not isinstance(result, Exception), result
    assert result.offset == 1 and waited < 5
