"""One benchmark process per client and process index: send the workload after a common
start barrier, until every record is acknowledged, and report what it measured.

Every client gets the same records (keys, values, order), the same settings and the same
pacing; latency is sampled on about ``LATENCY_SAMPLES`` records per process (send → ack).
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import psutil

from shmkafka.perf.workload import Workload
from shmkafka.shm import procs

LATENCY_SAMPLES = 2000
PROGRESS_EVERY = 1000


def cpu_seconds(pid: int | None = None) -> float:
    """The process's (this one's by default) CPU seconds; 0.0 once it is gone."""
    return procs.cpu_seconds(os.getpid() if pid is None else pid) or 0.0


def _paced(work: Workload, keys: Iterator[bytes | None], progress: Any) -> Iterator[bytes | None]:
    """The keys to send, honouring records or duration and the throughput cap."""
    rate = work.per_process_rate()
    start = time.monotonic()
    deadline = None if work.duration_s is None else start + work.duration_s
    sent = 0
    while True:
        if deadline is None and sent >= work.records:
            return
        if sent % PROGRESS_EVERY == 0:
            progress.value = sent
            if deadline is not None and time.monotonic() >= deadline:
                return
        if rate is not None:
            ahead = sent / rate - (time.monotonic() - start)
            if ahead > 0.001:
                time.sleep(ahead)
        sent += 1
        yield next(keys)


def produce_retrying(
    producer: Any, topic: str, value: bytes, key: bytes | None, callback: Callable[..., None]
) -> None:
    """confluent-kafka's produce(), waiting (serving reports) while its queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=callback)
            return
        except BufferError:
            producer.poll(0.005)


def _sample_every(work: Workload) -> int:
    expected = work.records if work.duration_s is None else int(work.duration_s * 200_000)
    return max(1, expected // LATENCY_SAMPLES)


def run_worker(
    client: str, bootstrap: str, work: Workload, process: int, barrier: Any, out: Any,
    progress: Any, pool: str,
) -> None:  # fmt: skip
    runners: dict[str, Callable[..., dict[str, Any]]] = {
        "shmkafka": _shmkafka, "kafka-python": _kafka_python, "confluent-kafka": _confluent,
    }  # fmt: skip
    runner = runners[client]
    try:
        out.put(runner(bootstrap, work, process, barrier, progress, pool))
    except BaseException as exc:
        barrier.abort()
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def pss(pid: int | None = None) -> int:
    """The process's proportional set size now: shared pages (a pool's segment, libraries)
    divided among the processes that map them, so a sum over processes counts them once."""
    try:
        return int(psutil.Process(pid).memory_full_info().pss)
    except (psutil.Error, AttributeError):
        return 0


def _report(
    start: tuple[float, float], sent: int, errors: int, latencies: list[float], **extra: Any
) -> dict[str, Any]:
    """``start``: (monotonic time, CPU seconds) at the barrier."""
    return {
        "start": start[0], "end": time.monotonic(), "sent": sent, "errors": errors,
        "latencies_ms": latencies, "cpu": cpu_seconds() - start[1],
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "pss": pss(),
        **extra,
    }  # fmt: skip


def _timed_sends(
    send: Callable[[bytes | None], Any], attach: Callable[[Any, Callable[[Any], None]], Any],
    work: Workload, keys: Iterator[bytes | None], progress: Any,
) -> tuple[tuple[float, float], Futures, list[float]]:  # fmt: skip
    """The timed loop of the future-returning clients: (start, futures, latencies). As a
    long-running producer would, it keeps the futures not yet done: every ``CHECK_EVERY``
    sends the done ones are counted (``futures.done``, ``futures.errors``) and let go."""
    start = (time.monotonic(), cpu_seconds())
    every, latencies, futures = _sample_every(work), list[float](), Futures()
    for i, key in enumerate(_paced(work, keys, progress)):
        future = send(key)
        futures.append(future)
        if i % every == 0:
            attach(future, _latency_probe(latencies))
        if i % CHECK_EVERY == 0:
            futures.settle()
    return start, futures, latencies


CHECK_EVERY = 4096


class Futures(deque[Any]):
    """Futures in send order, the done ones counted and dropped from the front."""

    def __init__(self) -> None:
        super().__init__()
        self.done = self.errors = 0

    def settle(self) -> None:
        while self and self[0].is_done:
            self.errors += self.popleft().failed()
            self.done += 1

    def sent(self) -> int:
        return self.done + len(self)

    def failed(self) -> int:
        """Errors among every future (call once all are done)."""
        return self.errors + sum(1 for f in self if f.failed())


# ---------------------------------------------------------------------------- shmkafka


def _latency_probe(latencies: list[float]) -> Callable[[Any], None]:
    """A done-callback that records the send → ack time of a future made just now."""
    t0 = time.monotonic()

    def done(_: Any) -> None:
        latencies.append((time.monotonic() - t0) * 1e3)

    return done


def _shmkafka(bootstrap: str, work: Workload, process: int, barrier: Any, progress: Any,
              pool: str) -> dict[str, Any]:  # fmt: skip
    from shmkafka.producer.kafka_python import KafkaProducer
    from shmkafka.shm.stat import pool_stat

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=work.acks_int, compression_type=work.compression,
        compression_level=work.compression_level, linger_ms=work.linger_ms,
        batch_size=work.batch_size, buffer_memory=work.buffer_memory,
        enable_idempotence=work.idempotence,
        max_in_flight_requests_per_connection=work.max_in_flight, pool=pool,
    )  # fmt: skip
    value, keys = work.value(), work.keys_for(process)
    for _ in range(work.warmup):
        producer.send(work.topic, value, key=next(keys))
    producer.flush(120)

    def sender_counters() -> tuple[float, int, int]:
        stat = pool_stat(pool)["sender"]
        return cpu_seconds(stat["pid"]), stat["produce_requests"], stat["bytes_sent"]

    barrier.wait()
    before = sender_counters()
    start, futures, latencies = _timed_sends(
        lambda key: producer.send(work.topic, value, key=key),
        lambda future, probe: future.add_done_callback(probe), work, keys, progress,
    )  # fmt: skip
    producer.flush(600)
    after = sender_counters()
    errors = futures.failed()
    sender_pid = pool_stat(pool)["sender"]["pid"]
    sender_rss, sender_pss = psutil.Process(sender_pid).memory_info().rss, pss(sender_pid)
    report = _report(start, futures.sent(), errors, latencies, sender_cpu=(before[0], after[0]),
                     requests=(before[1], after[1]), bytes=(before[2], after[2]),
                     sender_rss=sender_rss, sender_pss=sender_pss)  # fmt: skip
    producer.close(30)
    return report


# ---------------------------------------------------------------------------- kafka-python


def _kafka_python(bootstrap: str, work: Workload, process: int, barrier: Any, progress: Any,
                  pool: str) -> dict[str, Any]:  # fmt: skip
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=work.acks_int,
        compression_type=None if work.compression == "none" else work.compression,
        linger_ms=work.linger_ms, batch_size=work.batch_size,
        enable_idempotence=work.idempotence,
        max_in_flight_requests_per_connection=work.max_in_flight,
    )  # fmt: skip
    value, keys = work.value(), work.keys_for(process)
    for _ in range(work.warmup):
        producer.send(work.topic, value, key=next(keys))
    producer.flush(120)
    barrier.wait()
    start, futures, latencies = _timed_sends(
        lambda key: producer.send(work.topic, value, key=key),
        lambda future, probe: future.add_both(probe), work, keys, progress,
    )  # fmt: skip
    producer.flush(600)
    # kafka-python keeps rates and averages, no totals: requests and bytes are estimated
    # from its records-per-request and request-size averages.
    metrics = producer.metrics()["producer-metrics"]
    requests = futures.sent() / max(metrics.get("records-per-request-avg") or 1.0, 1.0)
    wire = requests * (metrics.get("request-size-avg") or 0.0)
    errors = futures.failed()
    report = _report(start, futures.sent(), errors, latencies, requests=(0, requests),
                     bytes=(0, wire))  # fmt: skip
    producer.close(10)
    return report


# ---------------------------------------------------------------------------- confluent-kafka


def _confluent(bootstrap: str, work: Workload, process: int, barrier: Any, progress: Any,
               pool: str) -> dict[str, Any]:  # fmt: skip
    import confluent_kafka

    stats: list[dict[str, Any]] = []
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "acks": work.acks, "linger.ms": work.linger_ms,
        "compression.type": work.compression, "batch.size": work.batch_size,
        "enable.idempotence": work.idempotence, "partitioner": "murmur2_random",
        "max.in.flight": work.max_in_flight, "statistics.interval.ms": 200,
        "stats_cb": lambda text: stats.append(json.loads(text)), "log_level": 3,
    }  # fmt: skip
    if work.compression_level is not None:
        conf["compression.level"] = work.compression_level
    producer = confluent_kafka.Producer(conf)
    value, keys = work.value(), work.keys_for(process)
    counts = {"errors": 0, "done": 0}

    def on_delivery(err: Any, msg: Any) -> None:
        counts["done"] += 1
        counts["errors"] += err is not None

    def produce(key: bytes | None, callback: Callable[..., None]) -> None:
        produce_retrying(producer, work.topic, value, key, callback)

    for _ in range(work.warmup):
        produce(next(keys), on_delivery)
    producer.flush(120)
    producer.poll(0.3)  # a statistics event after the warm-up
    before = stats[-1] if stats else {}
    barrier.wait()
    counts.update(errors=0, done=0)
    start = (time.monotonic(), cpu_seconds())
    every, latencies, sent = _sample_every(work), list[float](), 0
    for i, key in enumerate(_paced(work, keys, progress)):
        if i % every == 0:
            probe = _latency_probe(latencies)

            def sampled(err: Any, msg: Any, probe: Callable[[Any], None] = probe) -> None:
                probe(msg)
                on_delivery(err, msg)

            produce(key, sampled)
        else:
            produce(key, on_delivery)
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
    producer.flush(600)
    end_report = _report(start, sent, counts["errors"], latencies)
    producer.poll(0.3)
    after = stats[-1] if stats else {}
    end_report.update(requests=(before.get("tx", 0), after.get("tx", 0)),
                      bytes=(before.get("tx_bytes", 0), after.get("tx_bytes", 0)))  # fmt: skip
    return end_report
