"""One benchmark process per client and process index: send the workload after a common
start barrier, until every record is acknowledged, and report what it measured.

Every client gets the same records (keys, values, order), the same workload settings and the
same pacing (pacing.py); latency is sampled on about ``LATENCY_SAMPLES`` records per process
(send → ack).

Rules:
- ``*_config`` build what each client is given, and nothing else: batch size, buffer memory
  and in-flight requests only when the workload sets them (else each client's own default).
- Broker connections are counted at the end of the timed loop (every connection the run
  needs is open then): the worker's own, and for shmkafka the pool Sender's.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import psutil

from shmkafka.perf.pacing import (
    LATENCY_SAMPLES,
    Futures,
    Pacer,
    Records,
    future_loop,
    produce_retrying,
    report_loop,
)
from shmkafka.perf.workload import Workload
from shmkafka.shm import procs

__all__ = ["LATENCY_SAMPLES", "cpu_seconds", "produce_retrying", "pss", "run_worker"]


def cpu_seconds(pid: int | None = None) -> float:
    """The process's (this one's by default) CPU seconds; 0.0 once it is gone."""
    return procs.cpu_seconds(os.getpid() if pid is None else pid) or 0.0


def pss(pid: int | None = None) -> int:
    """The process's proportional set size now: shared pages (a pool's segment, libraries)
    divided among the processes that map them, so a sum over processes counts them once."""
    try:
        return int(psutil.Process(pid).memory_full_info().pss)
    except (psutil.Error, AttributeError):
        return 0


def broker_ports(bootstrap: str) -> frozenset[int]:
    """The ports of a bootstrap list ("host:port,host:port"; 9092 when a port is left out)."""
    ports = set()
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        ports.add(int(port) if host and port.isdigit() else 9092)
    return frozenset(ports)


def connections(pid: int | None, ports: frozenset[int]) -> int:
    """The process's established TCP connections to any of ``ports``; 0 once it is gone."""
    try:
        return sum(
            1
            for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.raddr and c.raddr.port in ports and c.status == psutil.CONN_ESTABLISHED
        )
    except psutil.Error:
        return 0


# ---------------------------------------------------------------------------- configurations


def shmkafka_config(bootstrap: str, work: Workload, pool: str) -> dict[str, Any]:
    """``shmkafka.KafkaProducer``'s arguments (kafka-python's names)."""
    return {
        "bootstrap_servers": bootstrap, "acks": work.acks_int,
        "compression_type": work.compression, "linger_ms": work.linger_ms,
        "enable_idempotence": work.idempotence, "pool": pool,
        **({"pool_dir": work.pool_dir, "pool_durability": work.pool_durability}
           if work.pool_durability != "memory" else {}),
        **_given(compression_level=work.compression_level, batch_size=work.batch_size,
                 buffer_memory=work.buffer_memory,
                 max_in_flight_requests_per_connection=work.max_in_flight),
    }  # fmt: skip


def kafka_python_config(bootstrap: str, work: Workload) -> dict[str, Any]:
    """``kafka.KafkaProducer``'s arguments. kafka-python 3 has no ``buffer_memory`` (its
    queue is unbounded) and no ``compression_level``: those are given only to a version that
    has them."""
    from kafka import KafkaProducer

    known = KafkaProducer.DEFAULT_CONFIG
    optional = _given(batch_size=work.batch_size,
                      max_in_flight_requests_per_connection=work.max_in_flight,
                      buffer_memory=work.buffer_memory,
                      compression_level=work.compression_level)  # fmt: skip
    return {
        "bootstrap_servers": bootstrap, "acks": work.acks_int,
        "compression_type": None if work.compression == "none" else work.compression,
        "linger_ms": work.linger_ms, "enable_idempotence": work.idempotence,
        **{k: v for k, v in optional.items() if k in known},
    }  # fmt: skip


def confluent_config(bootstrap: str, work: Workload) -> dict[str, Any]:
    """librdkafka's properties, for confluent-kafka's and shmkafka's ``Producer``."""
    kbytes = None if work.buffer_memory is None else math.ceil(work.buffer_memory / 1024)
    return {
        "bootstrap.servers": bootstrap, "acks": work.acks, "linger.ms": work.linger_ms,
        "compression.type": work.compression, "enable.idempotence": work.idempotence,
        "partitioner": "murmur2_random", "log_level": 3,
        **_given(**{"compression.level": work.compression_level,
                    "batch.size": work.batch_size, "queue.buffering.max.kbytes": kbytes,
                    "max.in.flight": work.max_in_flight}),
    }  # fmt: skip


def shmkafka_confluent_config(bootstrap: str, work: Workload, pool: str) -> dict[str, Any]:
    durable = ({"shmkafka.pool.dir": work.pool_dir,
                "shmkafka.pool.durability": work.pool_durability}
               if work.pool_durability != "memory" else {})  # fmt: skip
    return {**confluent_config(bootstrap, work), "shmkafka.pool": pool, **durable}


def _given(**settings: Any) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if v is not None}


# ---------------------------------------------------------------------------- the workers


def run_worker(
    client: str, bootstrap: str, work: Workload, process: int, barrier: Any, out: Any,
    progress: Any, pool: str,
) -> None:  # fmt: skip
    runners: dict[str, Callable[..., dict[str, Any]]] = {
        "shmkafka": _shmkafka, "shmkafka-confluent": _shmkafka_confluent,
        "kafka-python": _kafka_python, "confluent-kafka": _confluent,
    }  # fmt: skip
    runner = runners[client]
    try:
        out.put(runner(bootstrap, work, process, barrier, progress, pool))
    except BaseException as exc:
        barrier.abort()
        out.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def _report(
    start: tuple[float, float, int], sent: int, errors: int, latencies: list[float],
    conf: dict[str, Any], conns: int, **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """``start``: (monotonic time, CPU seconds, voluntary context switches) at the barrier.
    The switches are the process's threads' waits that ended, by a wake or a timeout."""
    return {
        "start": start[0], "end": time.monotonic(), "sent": sent, "errors": errors,
        "latencies_ms": latencies, "cpu": cpu_seconds() - start[1],
        "wakes": resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - start[2],
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "pss": pss(),
        "config": {k: v for k, v in conf.items() if not callable(v)}, "connections": conns,
        **extra,
    }  # fmt: skip


def _timed_start() -> tuple[float, float, int]:
    return time.monotonic(), cpu_seconds(), resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


class _Sender:
    """The pool's Sender as its counters show it: CPU, produce requests, bytes and record
    batches sent; and the pool's commits (a durable pool: each is one msync)."""

    def __init__(self, pool: str) -> None:
        from shmkafka.pool.stat import pool_stat

        pool_now = pool_stat(pool)
        stat = pool_now["sender"]
        self.pid: int = stat["pid"]
        self.counters = (
            cpu_seconds(self.pid), stat["produce_requests"], stat["bytes_sent"],
            stat["batches_sent"], pool_now["durability"]["commits"],
        )  # fmt: skip

    @staticmethod
    def span(before: _Sender, after: _Sender) -> dict[str, Any]:
        (c0, r0, b0, n0, m0), (c1, r1, b1, n1, m1) = before.counters, after.counters
        return {
            "sender_cpu": (c0, c1), "requests": (r0, r1), "bytes": (b0, b1), "batches": (n0, n1),
            "commits": (m0, m1),
            "sender_rss": psutil.Process(after.pid).memory_info().rss,
            "sender_pss": pss(after.pid),
        }  # fmt: skip


FLUSH_BOUND_S = 130.0  # delivery.timeout.ms's default (120 s) and a margin


def _flush_futures(producer: Any, futures: Futures) -> dict[str, Any]:
    """Flush a futures API producer within ``FLUSH_BOUND_S``: the records left without a
    result then, and how long the flush waited (reported, never waited for silently)."""
    started = time.monotonic()
    with contextlib.suppress(Exception):  # (either library's KafkaTimeoutError: see below)
        producer.flush(FLUSH_BOUND_S)
    futures.settle()
    return {"unresolved": sum(1 for f in futures if not f.is_done),
            "flush_s": time.monotonic() - started}  # fmt: skip


def _warm_up_futures(producer: Any, work: Workload, records: Records) -> None:
    for _ in range(work.warmup):
        value, key = next(records)
        producer.send(work.topic, value, key=key)
    producer.flush(120)


# ---------------------------------------------------------------------------- shmkafka


def _shmkafka(bootstrap: str, work: Workload, process: int, barrier: Any, progress: Any,
              pool: str) -> dict[str, Any]:  # fmt: skip
    from shmkafka.kafka import KafkaProducer

    conf, ports = shmkafka_config(bootstrap, work, pool), broker_ports(bootstrap)
    producer = KafkaProducer(**conf)
    records = work.records_for(process)
    _warm_up_futures(producer, work, records)
    barrier.wait()
    before = _Sender(pool)
    start = _timed_start()
    futures, latencies = future_loop(
        producer.send, lambda future, probe: future.add_done_callback(probe), work.topic,
        Pacer(work, progress), records,
    )  # fmt: skip
    conns, sender_conns = connections(None, ports), connections(before.pid, ports)
    flushed = _flush_futures(producer, futures)
    after = _Sender(pool)
    report = _report(start, futures.sent(), futures.failed(), latencies, conf, conns,
                     sender_connections=sender_conns, **flushed,
                     **_Sender.span(before, after))  # fmt: skip
    producer.close(30)
    return report


def _shmkafka_confluent(bootstrap: str, work: Workload, process: int, barrier: Any,
                        progress: Any, pool: str) -> dict[str, Any]:  # fmt: skip
    from shmkafka.confluent_kafka import Producer

    conf, ports = shmkafka_confluent_config(bootstrap, work, pool), broker_ports(bootstrap)
    producer = Producer(conf)
    senders: list[_Sender] = []

    def counters(at_start: bool) -> dict[str, Any]:
        senders.append(_Sender(pool))
        if at_start:
            return {}
        return {"sender_connections": connections(senders[0].pid, ports),
                **_Sender.span(senders[0], senders[-1])}  # fmt: skip

    report = _delivery_reports(producer, work, process, barrier, progress, conf, ports, counters)
    producer.close(30)
    return report


# ---------------------------------------------------------------------------- kafka-python


def _kafka_python(bootstrap: str, work: Workload, process: int, barrier: Any, progress: Any,
                  pool: str) -> dict[str, Any]:  # fmt: skip
    from kafka import KafkaProducer

    conf, ports = kafka_python_config(bootstrap, work), broker_ports(bootstrap)
    producer = KafkaProducer(**conf)
    records = work.records_for(process)
    _warm_up_futures(producer, work, records)
    barrier.wait()
    start = _timed_start()
    futures, latencies = future_loop(
        producer.send, lambda future, probe: future.add_both(probe), work.topic,
        Pacer(work, progress), records,
    )  # fmt: skip
    conns = connections(None, ports)
    flushed = _flush_futures(producer, futures)
    # kafka-python keeps rates and averages, no totals: requests and bytes are estimated
    # from its records-per-request and request-size averages.
    metrics = producer.metrics()["producer-metrics"]
    requests = futures.sent() / max(metrics.get("records-per-request-avg") or 1.0, 1.0)
    wire = requests * (metrics.get("request-size-avg") or 0.0)
    report = _report(start, futures.sent(), futures.failed(), latencies, conf, conns,
                     requests=(0, requests), bytes=(0, wire), **flushed)  # fmt: skip
    producer.close(10)
    return report


# ---------------------------------------------------------------------------- confluent-kafka


def _confluent(bootstrap: str, work: Workload, process: int, barrier: Any, progress: Any,
               pool: str) -> dict[str, Any]:  # fmt: skip
    import confluent_kafka

    stats: list[dict[str, Any]] = []
    conf = confluent_config(bootstrap, work)
    producer = confluent_kafka.Producer({
        **conf, "statistics.interval.ms": 200,
        "stats_cb": lambda text: stats.append(json.loads(text)),
    })  # fmt: skip
    marks: list[dict[str, Any]] = []

    def counters(at_start: bool) -> dict[str, Any]:
        producer.poll(0.3)  # a statistics event after the warm-up, or after the run
        marks.append(stats[-1] if stats else {})
        if at_start:
            return {}
        before, after = marks[0], marks[-1]
        return {"requests": (before.get("tx", 0), after.get("tx", 0)),
                "bytes": (before.get("tx_bytes", 0), after.get("tx_bytes", 0))}  # fmt: skip

    return _delivery_reports(producer, work, process, barrier, progress, conf,
                             broker_ports(bootstrap), counters, before_barrier=True)  # fmt: skip


def _delivery_reports(
    producer: Any, work: Workload, process: int, barrier: Any, progress: Any,
    conf: dict[str, Any], ports: frozenset[int], counters: Callable[[bool], dict[str, Any]],
    before_barrier: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The run of a confluent-kafka API producer (confluent-kafka's or shmkafka's): every
    delivery report is counted, errors apart. ``counters(True)`` is read before the timed
    part (before the barrier if ``before_barrier``), ``counters(False)`` after it; the
    latter's result joins the report."""
    records = work.records_for(process)
    counts = {"errors": 0, "done": 0}

    def on_delivery(err: Any, msg: Any) -> None:
        counts["done"] += 1
        counts["errors"] += err is not None

    for _ in range(work.warmup):
        value, key = next(records)
        produce_retrying(producer, work.topic, value, key, on_delivery)
    producer.flush(120)
    if before_barrier:
        counters(True)
    barrier.wait()
    if not before_barrier:
        counters(True)
    counts.update(errors=0, done=0)
    start = _timed_start()
    pacer = Pacer(work, progress, wait=producer.poll)
    latencies = report_loop(producer, work.topic, pacer, records, on_delivery)
    conns = connections(None, ports)
    started = time.monotonic()
    producer.flush(FLUSH_BOUND_S)
    waited = time.monotonic() - started
    report = _report(start, pacer.sent, counts["errors"], latencies, conf, conns,
                     unresolved=pacer.sent - counts["done"], flush_s=waited)  # fmt: skip
    report.update(counters(False))
    return report
