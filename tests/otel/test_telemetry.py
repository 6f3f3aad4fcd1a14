from __future__ import annotations

from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from shmkafka.otel.semconv import Producer
from shmkafka.otel.telemetry import Telemetry, error_type_of

PRODUCER = Producer("c", ("h", 9092))


def test_a_dropped_trace_without_metrics_needs_no_result() -> None:
    dropping = TracerProvider(sampler=ALWAYS_OFF)
    for meters, wanted in [
        (NoOpMeterProvider(), False),
        (MeterProvider(), False),  # an SDK provider with no reader records nothing
        (MeterProvider(metric_readers=[InMemoryMetricReader()]), True),
    ]:
        send = Telemetry(dropping, meters).start("t", None, b"v", PRODUCER)
        assert send.wants_result is wanted
    kept = Telemetry(TracerProvider(), NoOpMeterProvider()).start("t", None, b"v", PRODUCER)
    assert kept.wants_result  # its span ends with the result


def test_a_span_ends_once() -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    send = Telemetry(tracer_provider, NoOpMeterProvider()).start("t", b"k", b"v", PRODUCER)
    send.delivered(0, 7)
    send.failed(RuntimeError("late"), "RuntimeError")  # (a second result changes nothing)
    (span,) = spans.get_finished_spans()
    assert dict(span.attributes or {})["messaging.kafka.message.offset"] == 7


def test_error_types() -> None:
    from shmkafka.errors import KafkaTimeoutError, NotLeaderForPartitionError

    assert error_type_of(KafkaTimeoutError("x")) == "KafkaTimeoutError"
    assert error_type_of(NotLeaderForPartitionError()) in (
        "NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER", "NotLeaderForPartitionError",
    )  # fmt: skip
