"""The cost of tracing a send, shmkafka's instrumentor beside the peers' own, in one run on Tansu.

    make bench-otel    # or: .venv/bin/python perf/bench_otel.py [--records N] [--rounds R]

Each case runs in a process of its own (an instrumentation is process-wide): one producer at
its client's defaults (linger 5 ms) sends N records of 100 bytes with 16-byte keys to one
topic, then flushes; the time from the first call to the end of the flush, per record, so
the spans' ends (at delivery, for shmkafka) are in it. Cases: each client without
instrumentation; shmkafka's ``KafkaProducer`` and ``Producer`` with ``ShmkafkaInstrumentor``
(spans to a batch processor whose exporter drops them, metrics to an in-memory reader), with
a sampler that drops every trace, and with that sampler and no metrics; confluent-kafka
with ``ConfluentKafkaInstrumentor`` (its documented ``instrument_producer`` proxy) and
kafka-python with ``KafkaInstrumentor``, set up the same way. R rounds, in turn; the
median of µs per record, and what tracing adds to the same client without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

VALUE = b"v" * 100
KEYS = [b"k%015d" % i for i in range(10007)]
TOPIC = "otel-bench"
CASES = (
    ("shmkafka KafkaProducer.send", "kafka", "off"),
    ("  + ShmkafkaInstrumentor", "kafka", "traced"),
    ("  + ShmkafkaInstrumentor, trace dropped", "kafka", "dropped"),
    ("  + ShmkafkaInstrumentor, dropped, no metrics", "kafka", "quiet"),
    ("shmkafka Producer.produce", "confluent", "off"),
    ("  + ShmkafkaInstrumentor", "confluent", "traced"),
    ("  + ShmkafkaInstrumentor, trace dropped", "confluent", "dropped"),
    ("  + ShmkafkaInstrumentor, dropped, no metrics", "confluent", "quiet"),
    ("confluent-kafka Producer.produce", "peer-confluent", "off"),
    ("  + ConfluentKafkaInstrumentor", "peer-confluent", "traced"),
    ("kafka-python KafkaProducer.send", "peer-kafka", "off"),
    ("  + KafkaInstrumentor", "peer-kafka", "traced"),
)


def providers(dropped: bool, metrics: bool = True) -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    class Dropping(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider(sampler=ALWAYS_OFF if dropped else ALWAYS_ON)
    tracer_provider.add_span_processor(BatchSpanProcessor(Dropping()))
    if not metrics:
        from opentelemetry.metrics import NoOpMeterProvider

        return tracer_provider, NoOpMeterProvider()
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


def producer_for(api: str, mode: str, bootstrap: str) -> tuple[Callable[[int], None], Any]:
    """(send n records, flush) for one case, instrumented as the case says."""
    pool = "bo" + uuid.uuid4().hex[:10]
    tracer_provider, meter_provider = providers(mode in ("dropped", "quiet"), mode != "quiet")
    if api in ("kafka", "confluent") and mode != "off":
        from shmkafka.otel import ShmkafkaInstrumentor

        ShmkafkaInstrumentor().instrument(tracer_provider=tracer_provider,
                                          meter_provider=meter_provider)  # fmt: skip
    if api == "peer-kafka" and mode != "off":
        from opentelemetry.instrumentation.kafka import KafkaInstrumentor

        KafkaInstrumentor().instrument(tracer_provider=tracer_provider)
    if api in ("kafka", "peer-kafka"):
        if api == "kafka":
            from shmkafka.kafka import KafkaProducer

            producer: Any = KafkaProducer(bootstrap_servers=bootstrap, pool=pool, linger_ms=5)
        else:
            from kafka import KafkaProducer as PeerProducer

            producer = PeerProducer(bootstrap_servers=bootstrap, linger_ms=5)
        return _sends(producer.send), lambda: producer.flush()
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    if api == "confluent":
        from shmkafka.confluent_kafka import Producer

        producer = Producer({**conf, "shmkafka.pool": pool})
    else:
        import confluent_kafka

        producer = confluent_kafka.Producer(conf)
        if mode != "off":
            from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor

            producer = ConfluentKafkaInstrumentor().instrument_producer(
                producer, tracer_provider=tracer_provider
            )
    return _produces(producer), lambda: producer.flush(60)


def _sends(send: Callable[..., Any]) -> Callable[[int], None]:
    def run(n: int) -> None:
        for i in range(n):
            send(TOPIC, VALUE, key=KEYS[i % 10007])

    return run


def _produces(producer: Any) -> Callable[[int], None]:
    def run(n: int) -> None:
        for i in range(n):
            while True:
                try:
                    producer.produce(TOPIC, value=VALUE, key=KEYS[i % 10007])
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)

    return run


def case(api: str, mode: str, bootstrap: str, records: int) -> float:
    """One case in this process: µs per record, from the first call to the flush's end."""
    send, flush = producer_for(api, mode, bootstrap)
    send(1000)  # warm: metadata, the pool's route
    flush()
    started = time.perf_counter()
    send(records)
    flush()
    return (time.perf_counter() - started) / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        api, mode, bootstrap = args.case
        print(json.dumps(case(api, mode, bootstrap, args.records)))
        return
    from shmkafka.perf.brokers import run_tansu

    results: list[list[float]] = [[] for _ in CASES]  # (names repeat: by index)
    with run_tansu() as broker:
        for _ in range(args.rounds):
            for index, (_, api, mode) in enumerate(CASES):
                out = subprocess.run(
                    [sys.executable, __file__, "--records", str(args.records), "--case", api,
                     mode, broker.bootstrap], check=True, capture_output=True, text=True,
                    timeout=600,
                )  # fmt: skip
                results[index].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"µs per record (call to flush's end), {args.records} records of 100 B, median of "
          f"{args.rounds} rounds; +: what tracing adds to the same client")  # fmt: skip
    base = 0.0
    for (name, _, mode), values in zip(CASES, results, strict=True):
        median = statistics.median(values)
        if mode == "off":
            base = median
            print(f"  {name:44s} {median:7.2f}")
        else:
            print(f"  {name:44s} {median:7.2f}   +{median - base:6.2f}")


if __name__ == "__main__":
    main()
