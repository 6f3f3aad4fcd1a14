"""The metrics' arithmetic (pool/metrics.py) and the Sender counters' publication
(shm/sender_counters.py): a reader never sees a counter go down while one Sender writes,
and a new Sender starts a new rate window."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from shmkafka.pool.metrics import PoolSample, RateWindow, kafka_metrics
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.sender_counters import SenderCounters


def _publish_rising(pool: str, rounds: int, started: Any) -> None:
    handle = SharedPool.open(pool)
    counters = SenderCounters()
    started.set()
    for n in range(1, rounds + 1):
        counters.records_sent = counters.produce_requests = counters.bytes_sent = n * 1000
        counters.publish(handle.segment)
    handle.detach()


def test_counters_read_while_published_never_go_down(pool: SharedPool) -> None:
    ctx = mp.get_context("spawn")
    started = ctx.Event()
    writer = ctx.Process(target=_publish_rising, args=(pool.name, 200_000, started))
    writer.start()
    assert started.wait(30)
    last, reads = SenderCounters(), 0
    while writer.is_alive() or reads == 0:
        now = SenderCounters.read(pool.segment)
        for name in ("records_sent", "produce_requests", "bytes_sent"):
            assert getattr(now, name) >= getattr(last, name), (name, now, last)
            assert getattr(now, name) % 1000 == 0  # never a torn, half-written value
        last, reads = now, reads + 1
    writer.join(30)
    assert writer.exitcode == 0 and reads > 100
    assert SenderCounters.read(pool.segment).records_sent == 200_000_000


def _at(t: float, sender: tuple[int, int], records: int) -> PoolSample:
    counters = SenderCounters(records_sent=records, produce_requests=records // 10)
    return PoolSample("p", t, counters=counters, sender=sender)


def test_rates_over_the_window_and_a_new_sender_starts_a_new_one() -> None:
    window = RateWindow(window_s=10)
    first, second = (100, 1), (200, 2)
    window.add(_at(0.0, first, 0))
    window.add(_at(5.0, first, 5000))
    assert window.metrics()["record-send-rate"] == 1000
    assert window.metrics()["records-per-request-avg"] == 10
    window.add(_at(20.0, first, 10000))  # the sample at 0 s left the 10 s window
    assert window.metrics()["record-send-rate"] == 5000 / 15
    window.add(_at(21.0, second, 50))  # a new Sender: counting again from 0
    assert window.metrics()["record-send-rate"] == 0 and window.metrics()["record-send-total"] == 50
    window.add(_at(22.0, second, 150))
    assert window.metrics()["record-send-rate"] == 100
    window.add(_at(23.0, (0, 0), 150))  # the Sender stopped: its counters stay
    assert window.metrics()["record-send-rate"] == 50
    window.add(_at(24.0, (300, 3), 30))  # a third one, after a time with none
    assert window.metrics()["record-send-rate"] == 0 and window.metrics()["record-send-total"] == 30


def test_the_first_sender_of_a_new_pool_keeps_the_window() -> None:
    window = RateWindow(window_s=10)
    window.add(_at(0.0, (0, 0), 0))  # the pool made, its Sender not yet recorded
    window.add(_at(1.0, (100, 1), 400))
    assert window.metrics()["record-send-rate"] == 400


def test_no_older_sample_means_no_rates() -> None:
    values = kafka_metrics(None, _at(1.0, (1, 1), 500))
    assert values["record-send-total"] == 500 and values["record-send-rate"] == 0
