"""One instrumentation's tracer and instruments, and the life of one send span.

Rules:
- A span starts in the app's call (``send``/``produce``), before the record is appended, and
  ends when the record's result comes: delivered (its partition and offset) or failed (its
  error). It never ends in the call, so it measures what the user waits for.
- The trace context goes into the record's headers with the global propagator, before the
  record reaches shared memory. Only what the propagator writes is added (a header of that
  name already there is replaced); with nothing written, the headers are left as given, so
  a record without headers keeps the producer's short path.
- A span the sampler drops (not recording) gets no attributes and no events: its cost is
  the span object and what the propagator writes.
- The metrics are recorded once per record, when its result comes, whether or not its span
  is sampled.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from opentelemetry import context, metrics, propagate, trace
from opentelemetry.metrics import CallbackOptions, NoOpMeterProvider, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode

from shmkafka.otel import semconv
from shmkafka.otel.semconv import Names, Producer
from shmkafka.otel.views import BatchViews

VERSION = "0.1.0"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.27.0"
Headers = list[tuple[str, bytes]]
MAX_ATTRIBUTE_SETS = 10_000  # metric attribute sets kept made (topics x partitions x errors)


class Telemetry:
    """The tracer, the two messaging instruments and the names one instrumentation uses."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None,
                 names: Names | None = None) -> None:  # fmt: skip
        self.names = names if names is not None else semconv.names_chosen()
        self.views = BatchViews()  # the Sender's view of recent batches (views.py)
        self._heads: dict[str, tuple[str, dict[str, Any]]] = {}  # topic → (span name, head)
        self._duration_attributes: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.tracer = trace.get_tracer(
            "shmkafka.otel", VERSION, tracer_provider, schema_url=SCHEMA_URL
        )
        meter = metrics.get_meter("shmkafka.otel", VERSION, meter_provider, schema_url=SCHEMA_URL)
        self.metrics_on = metrics_wanted(meter_provider or metrics.get_meter_provider())
        self.meter = meter
        # Counted here and read at each collection: the SDK's per-measurement work (each
        # attribute checked and hashed) would cost more than the rest of a record's.
        self._sent: dict[tuple[Any, ...], list[Any]] = {}  # key → [attributes, count]
        meter.create_observable_counter(
            semconv.SENT_MESSAGES, [self._observe_sent], unit="{message}",
            description="Messages a producer attempted to send to the broker.",
        )  # fmt: skip
        self.duration = meter.create_histogram(
            semconv.OPERATION_DURATION, unit="s",
            description="Duration of a send: from the call to the broker's answer.",
            explicit_bucket_boundaries_advisory=list(semconv.DURATION_BUCKETS),
        )  # fmt: skip

    def start(self, topic: str, key: Any, value: Any, producer: Producer) -> Send:
        """Start the span of one record (the current context is its parent). The sampler
        sees the attributes that name the operation; the others are set only on a span it
        keeps (the SDK checks each attribute it is given: a dropped trace costs none)."""
        head = self._heads.get(topic)
        if head is None:
            head = self._heads[topic] = (f"send {topic}", semconv.head_attributes(topic))
        span = self.tracer.start_span(head[0], kind=SpanKind.PRODUCER, attributes=head[1])
        if span.is_recording():
            body = len(value) if isinstance(value, (bytes, bytearray, memoryview, str)) else None
            span.set_attributes(semconv.send_attributes(self.names, topic, key, body, producer))
        return Send(self, span, topic, producer)

    def count_sent(self, topic: str, partition: int | None, error_type: str | None,
                   producer: Producer) -> None:  # fmt: skip
        key = (topic, partition, error_type, producer.server)
        counted = self._sent.get(key)
        if counted is None:
            attributes = semconv.metric_attributes(topic, partition, error_type, producer)
            counted = self._sent.setdefault(key, [attributes, 0])
        counted[1] += 1  # (the completion thread, or a thread whose call raised: the GIL's)

    def _observe_sent(self, options: CallbackOptions) -> Iterable[Observation]:
        for attributes, count in list(self._sent.values()):
            yield Observation(count, attributes)

    def duration_attributes(self, topic: str, error_type: str | None,
                            producer: Producer) -> dict[str, Any]:  # fmt: skip
        """One record's duration attributes (one dict per distinct set, made once)."""
        key = (topic, error_type, producer.server)
        found = self._duration_attributes.get(key)
        if found is None:
            if len(self._duration_attributes) > MAX_ATTRIBUTE_SETS:
                self._duration_attributes.clear()
            found = self._duration_attributes[key] = semconv.duration_attributes(
                topic, error_type, producer
            )
        return found


def metrics_wanted(provider: Any) -> bool:
    """False for a meter provider that records nothing (the API's no-op, or an SDK provider
    with no reader): then a record whose span is dropped needs no result at all."""
    if isinstance(provider, NoOpMeterProvider):
        return False
    readers = getattr(provider, "_metric_readers", None)  # (the SDK's MeterProvider)
    return readers is None or bool(readers)


class Send:
    """One record's span and the facts its metrics need."""

    __slots__ = ("ended", "producer", "span", "started", "started_ns", "telemetry", "topic")

    def __init__(self, telemetry: Telemetry, span: Any, topic: str, producer: Producer) -> None:
        self.telemetry, self.span, self.topic, self.producer = telemetry, span, topic, producer
        self.started_ns = time.time_ns()
        self.started = time.monotonic()
        self.ended = False

    @property
    def wants_result(self) -> bool:
        """Whether the record's result is needed: for its span, or for the metrics. A
        dropped trace with metrics off needs nothing more after the call."""
        return self.telemetry.metrics_on or self.span.is_recording()

    def headers(self, given: Any) -> Any:
        """``given`` (a list of (str, bytes), a dict, or None) with the trace context added;
        ``given`` itself when the propagator writes nothing."""
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span, context.Context()))
        if not carrier:
            return given
        if isinstance(given, dict):
            return {**given, **{k: v.encode("utf-8") for k, v in carrier.items()}}
        kept: Headers = [h for h in (given or ()) if h[0] not in carrier]
        return kept + [(k, v.encode("utf-8")) for k, v in carrier.items()]

    def delivered(self, partition: int | None, offset: int | None,
                  latency_s: float | None = None) -> None:  # fmt: skip
        self._end(partition, offset, None, None, latency_s)

    def failed(self, error: BaseException | None, error_type: str,
               partition: int | None = None, latency_s: float | None = None) -> None:  # fmt: skip
        self._end(partition, None, error, error_type, latency_s)

    def _end(self, partition: int | None, offset: int | None, error: BaseException | None,
             error_type: str | None, latency_s: float | None) -> None:  # fmt: skip
        """End the span (once) and record the metrics. ``latency_s``: how long after the
        call the result came, when it is read later (a confluent report served by poll)."""
        if self.ended:
            return
        self.ended = True
        telemetry, span = self.telemetry, self.span
        took = latency_s if latency_s is not None else time.monotonic() - self.started
        if span.is_recording():
            span.set_attributes(semconv.delivery_attributes(telemetry.names, partition, offset))
            if partition is not None and offset is not None and offset >= 0:
                view = telemetry.views.find(self.topic, partition, offset)
                if view is not None:
                    span.set_attributes(semconv.sender_view_attributes(view))
            if error_type is not None:
                span.set_attribute(semconv.ERROR_TYPE, error_type)
                if error is not None:
                    span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, str(error) if error else error_type))
        span.end(end_time=self.started_ns + int(took * 1e9))
        telemetry.count_sent(self.topic, partition, error_type, self.producer)
        telemetry.duration.record(
            took, telemetry.duration_attributes(self.topic, error_type, self.producer)
        )


def error_type_of(error: BaseException) -> str:
    """``error.type`` of an exception: the Kafka error's name when it has one (a
    confluent ``KafkaException`` carries a ``KafkaError``), else the exception's class
    name."""
    carried = error.args[0] if error.args else None
    if callable(getattr(carried, "name", None)):
        return str(carried.name())  # type: ignore[union-attr]
    code_name = getattr(error, "errno_name", None) or getattr(error, "message", None)
    if isinstance(code_name, str) and code_name.isupper():
        return code_name
    return type(error).__qualname__
