"""A future's callback that raises, ``sys.exit()`` too, on the completion thread: the other
callbacks run, and the thread goes on delivering every later result of the process."""

from __future__ import annotations

import threading

import pytest

from shmkafka import KafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.producer.futures import Future

pytestmark = pytest.mark.usefixtures("pool_removed")


def test_a_callback_that_exits_or_raises_ends_neither_the_callbacks_nor_the_thread(
    pool_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    called: list[tuple[int, str]] = []
    raising = {0: SystemExit(3), 1: ValueError("the app's bug")}

    def callback(index: int) -> object:
        def on_done(future: Future) -> None:
            called.append((index, threading.current_thread().name))
            if index in raising:
                raise raising[index]

        return on_done

    stub = BrokerStub(partitions=1)
    # (a long linger: the futures are pending when their callbacks are added, so the
    # callbacks run on the completion thread, not here)
    with stub:
        producer = KafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name,
                                 linger_ms=60_000)  # fmt: skip
        try:
            futures = [producer.send("t", b"v%d" % i) for i in range(10)]
            for i, future in enumerate(futures):
                assert not future.is_done
                future.add_done_callback(callback(i))
            producer.flush(10)
            # the thread still delivers: a later record's callback runs, its flush returns
            later = producer.send("t", b"later")
            later.add_done_callback(callback(10))
            producer.flush(10)
            assert later.get(10).offset == 10
        finally:
            producer.close(timeout=10)
    assert sorted(index for index, _ in called) == list(range(11))
    assert {name for _, name in called} == {"shmkafka-completions"}
    assert caplog.text.count("a future's callback raised") == 2
    assert "SystemExit: 3" in caplog.text and "ValueError: the app's bug" in caplog.text
