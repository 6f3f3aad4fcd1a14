"""ShmkafkaInstrumentor against Tansu: a span per record that ends at its delivery, the trace
context read back by each peer library's consumer, the messaging metrics, sampling, and the
peers' own instrumentors on shmkafka's classes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from shmkafka.aiokafka import AIOKafkaProducer
from shmkafka.confluent_kafka import Producer
from shmkafka.facades.kafka_python.producer import KafkaProducer as FacadeKafkaProducer
from shmkafka.kafka import KafkaProducer
from shmkafka.otel import ShmkafkaInstrumentor
from tests.integration.kafka_io import (
    cluster,
    consume_all,
    kafka_python_consume_all,
    unique_topic,
)
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")

RESULT_S = 30  # the bound on every wait for a record's result


class Telemetry:
    def __init__(self, sampler: Any = None) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(**({"sampler": sampler} if sampler else {}))
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("test")

    def sends(self) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith("send ")]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [
            point
            for resource in (data.resource_metrics if data else ())
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@contextlib.contextmanager
def instrumented(telemetry: Telemetry) -> Iterator[Telemetry]:
    instrumentor = ShmkafkaInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider,
                            meter_provider=telemetry.meter_provider)  # fmt: skip
    try:
        yield telemetry
    finally:
        instrumentor.uninstrument()


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    with instrumented(Telemetry()) as telemetry:
        yield telemetry


def _topic(tansu: Peer, prefix: str, partitions: int = 1) -> str:
    topic = unique_topic(prefix)
    with cluster(tansu) as c:
        c.ensure_topic(topic, partitions)
    return topic


def _send_kafka(peer: Peer, pool: str, topic: str, values: list[bytes]) -> list[Any]:
    with KafkaProducer(bootstrap_servers=peer.bootstrap, pool=pool) as p:
        futures = [p.send(topic, v, key=b"k%d" % i) for i, v in enumerate(values)]
        return [(f.get(RESULT_S).partition, f.get(RESULT_S).offset) for f in futures]


def _send_confluent(peer: Peer, pool: str, topic: str, values: list[bytes]) -> list[Any]:
    reports: list[Any] = []
    with Producer({"bootstrap.servers": peer.bootstrap, "shmkafka.pool": pool}) as p:
        for i, v in enumerate(values):
            p.produce(topic, v, b"k%d" % i, on_delivery=lambda e, m: reports.append((e, m)))
        assert p.flush(RESULT_S) == 0
    assert all(e is None for e, _ in reports)
    by_value = {m.value(): (m.partition(), m.offset()) for _, m in reports}
    return [by_value[v] for v in values]


def _send_aiokafka(peer: Peer, pool: str, topic: str, values: list[bytes]) -> list[Any]:
    async def main() -> list[Any]:
        p = AIOKafkaProducer(bootstrap_servers=peer.bootstrap, pool=pool)
        await p.start()
        try:
            futures = [await p.send(topic, v, key=b"k%d" % i) for i, v in enumerate(values)]
            done = [await asyncio.wait_for(f, RESULT_S) for f in futures]
        finally:
            await p.stop()
        return [(m.partition, m.offset) for m in done]

    return asyncio.run(main())


SENDERS: dict[str, Callable[[Peer, str, str, list[bytes]], list[Any]]] = {
    "kafka": _send_kafka, "confluent": _send_confluent, "aiokafka": _send_aiokafka,
}  # fmt: skip


@pytest.mark.parametrize("api", list(SENDERS))
def test_a_span_per_record_ends_at_its_delivery(
    tansu: Peer, pool_name: str, otel: Telemetry, api: str
) -> None:
    topic = _topic(tansu, f"otel-{api}", 2)
    values = [b"%s-%d" % (api.encode(), i) for i in range(4)]
    with otel.tracer.start_as_current_span("request") as parent:
        delivered = SENDERS[api](tansu, pool_name, topic, values)
    spans = otel.sends()
    assert len(spans) == len(values)
    for span, (partition, offset) in zip(sorted(spans, key=lambda s: s.start_time or 0),
                                          delivered, strict=True):  # fmt: skip
        assert span.name == f"send {topic}" and span.kind is SpanKind.PRODUCER
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
        attributes = dict(span.attributes or {})
        assert attributes["messaging.system"] == "kafka"
        assert attributes["messaging.destination.name"] == topic
        # the span ended with the record's result: no peer's instrumentation has these
        assert attributes["messaging.kafka.destination.partition"] == partition
        assert attributes["messaging.kafka.message.offset"] == offset
        assert attributes["server.port"] == tansu.brokers[0][1]
        assert span.status.status_code is not StatusCode.ERROR
        # the Sender's view of the record's batch, through the pool
        assert attributes["shmkafka.batch.retries"] == 0
        assert attributes["shmkafka.broker.node.id"] >= 0
        assert 0 <= attributes["shmkafka.request.duration_ms"] <= RESULT_S * 1000
        assert 0 <= attributes["shmkafka.batch.queued_ms"] <= RESULT_S * 1000
    keys = sorted(dict(s.attributes or {})["messaging.kafka.message.key"] for s in spans)
    assert keys == ["k0", "k1", "k2", "k3"]
    sent = otel.points("messaging.client.sent.messages")  # (a point per partition)
    assert sum(p.value for p in sent) == len(values)
    assert {p.attributes["messaging.destination.name"] for p in sent} == {topic}
    durations = otel.points("messaging.client.operation.duration")
    assert sum(p.count for p in durations) == len(values)


def test_each_peer_consumer_continues_the_trace(
    tansu: Peer, pool_name: str, otel: Telemetry
) -> None:
    topic = _topic(tansu, "otel-read")
    values = [b"v%d" % i for i in range(3)]
    _send_kafka(tansu, pool_name, topic, values)
    sent = {dict(s.attributes or {})["messaging.kafka.message.offset"]: s for s in otel.sends()}

    def parent_of(headers: Any) -> Any:
        carrier = {k: v.decode() for k, v in headers or ()}
        return trace.get_current_span(propagate.extract(carrier)).get_span_context()

    confluent_read = consume_all(tansu, topic, [0], len(values))
    kafka_python_read = kafka_python_consume_all(tansu, topic, [0], len(values))
    aiokafka_read = asyncio.run(_aiokafka_consume(tansu, topic, len(values)))
    for offset, headers in [
        *((m.offset(), m.headers()) for m in confluent_read),
        *((r.offset, r.headers) for r in kafka_python_read),  # type: ignore[attr-defined]
        *((r.offset, r.headers) for r in aiokafka_read),
    ]:
        context = parent_of(headers)
        assert context.is_valid and context.trace_id == sent[offset].context.trace_id
        assert context.span_id == sent[offset].context.span_id


async def _aiokafka_consume(peer: Peer, topic: str, expected: int) -> list[Any]:
    import aiokafka

    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=peer.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([aiokafka.TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        out: list[Any] = []
        async with asyncio.timeout(RESULT_S):
            while len(out) < expected:
                out.append(await consumer.getone())
        return out
    finally:
        await consumer.stop()


def test_a_dropped_trace_makes_no_span_and_the_records_flow(tansu: Peer, pool_name: str) -> None:
    topic = _topic(tansu, "otel-off")
    with instrumented(Telemetry(sampler=ALWAYS_OFF)) as telemetry:
        _send_kafka(tansu, pool_name, topic, [b"a", b"b"])
    assert telemetry.spans.get_finished_spans() == ()
    (read,) = [consume_all(tansu, topic, [0], 2)]
    for message in read:  # the propagator still writes the context, its sampled flag off
        (traceparent,) = [v for k, v in message.headers() or () if k == "traceparent"]
        assert int(traceparent.rsplit(b"-", 1)[1], 16) & 1 == 0
    (sent,) = telemetry.points("messaging.client.sent.messages")
    assert sent.value == 2  # metrics count every record, sampled or not


def test_a_call_that_raises_ends_its_span_with_the_error(
    tansu: Peer, pool_name: str, otel: Telemetry
) -> None:
    with (
        KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name) as p,
        pytest.raises(TypeError),
    ):
        p.send(unique_topic("otel-bad"), value=12345)  # no serializer: bytes only
    (span,) = otel.sends()
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "TypeError"


def test_uninstrument_puts_the_facades_own_calls_back() -> None:
    original = FacadeKafkaProducer.send
    instrumentor = ShmkafkaInstrumentor()
    instrumentor.instrument()
    assert FacadeKafkaProducer.send is not original
    instrumentor.uninstrument()
    assert FacadeKafkaProducer.send is original


def test_the_stable_names_on_opt_in(
    tansu: Peer, pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "messaging")
    topic = _topic(tansu, "otel-new")
    with instrumented(Telemetry()) as telemetry:
        ((partition, offset),) = _send_kafka(tansu, pool_name, topic, [b"x"])
    (span,) = telemetry.sends()
    attributes = dict(span.attributes or {})
    assert attributes["messaging.destination.partition.id"] == str(partition)
    assert attributes["messaging.kafka.offset"] == offset
    assert attributes["messaging.operation.type"] == "send"
    assert "messaging.kafka.message.offset" not in attributes


def test_confluent_kafkas_own_instrumentor_wraps_a_shmkafka_producer(
    tansu: Peer, pool_name: str
) -> None:
    from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor

    telemetry = Telemetry()
    topic = _topic(tansu, "otel-contrib")
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name})
    proxied = ConfluentKafkaInstrumentor().instrument_producer(
        producer, tracer_provider=telemetry.tracer_provider
    )
    proxied.produce(topic, b"through the contrib proxy")
    assert proxied.flush(RESULT_S) == 0
    producer.close()
    (span,) = telemetry.spans.get_finished_spans()
    (message,) = consume_all(tansu, topic, [0], 1)
    carrier = {k: v.decode() for k, v in message.headers() or ()}
    context = trace.get_current_span(propagate.extract(carrier)).get_span_context()
    assert context.span_id == span.context.span_id


@pytest.mark.parametrize("peer_api", ["kafka", "aiokafka"])
def test_the_peers_class_instrumentors_do_not_see_shmkafka(
    tansu: Peer, pool_name: str, peer_api: str
) -> None:
    # They wrap kafka.KafkaProducer.send and aiokafka.AIOKafkaProducer.send, the peers' own
    # classes, which shmkafka's are not (docs/observability.md).
    from opentelemetry.instrumentation.aiokafka import AIOKafkaInstrumentor
    from opentelemetry.instrumentation.kafka import KafkaInstrumentor

    telemetry = Telemetry()
    instrumentor = KafkaInstrumentor() if peer_api == "kafka" else AIOKafkaInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        topic = _topic(tansu, "otel-peer")
        SENDERS[peer_api](tansu, pool_name, topic, [b"x"])
    finally:
        instrumentor.uninstrument()
    assert telemetry.spans.get_finished_spans() == ()


def test_the_pools_figures_come_from_shared_memory(
    tansu: Peer, pool_name: str, otel: Telemetry
) -> None:
    topic = _topic(tansu, "otel-pool")
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name) as p:
        for i in range(5):
            p.send(topic, b"%d" % i).get(RESULT_S)
        # (the Sender publishes its counters, and frees a batch, just after it posted the
        # batch's completion: the figures settle within a round)
        deadline = time.monotonic() + RESULT_S
        while True:
            (sent,) = otel.points("shmkafka.sender.records.sent")
            (depth,) = otel.points("shmkafka.pool.queue.depth")
            if (sent.value, depth.value) == (5, 0) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert sent.value == 5 and sent.attributes == {"shmkafka.pool.name": pool_name}
        assert depth.value == 0  # every record acknowledged: no batch left
        (limit,) = otel.points("shmkafka.pool.buffer.limit")
        assert limit.value == p._handle.pool.config.buffer_memory
    assert otel.points("shmkafka.sender.records.sent") == []  # no producer: no pool to report


def _offsets_of(spans: list[ReadableSpan]) -> list[int]:
    return sorted(dict(s.attributes or {})["messaging.kafka.message.offset"] for s in spans)


def test_the_confluent_apis_beneath_produce_are_traced(
    tansu: Peer, pool_name: str, otel: Telemetry
) -> None:
    from shmkafka.confluent_kafka import SerializingProducer
    from shmkafka.confluent_kafka.aio import AIOProducer, AsyncSerializingProducer

    topic = _topic(tansu, "otel-apis")
    conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name}
    serializing = SerializingProducer({**conf, "value.serializer": lambda v, ctx: v.encode()})
    serializing.produce(topic, value="serialized")
    assert serializing.flush(RESULT_S) == 0

    async def aio() -> None:
        async with AIOProducer(conf) as producer:
            await (await producer.produce(topic, b"aio"))
        producer = await AsyncSerializingProducer(
            {**conf, "value.serializer": lambda v, ctx: v.encode()}
        )
        await (await producer.produce(topic, value="async serialized"))
        await producer.close()

    asyncio.run(asyncio.wait_for(aio(), RESULT_S))
    spans = otel.sends()
    assert _offsets_of(spans) == [0, 1, 2]  # each delivered record's span, with its offset
    values = [m.value() for m in consume_all(tansu, topic, [0], 3)]
    assert values == [b"serialized", b"aio", b"async serialized"]


def test_a_transactions_records_are_traced(tansu: Peer, pool_name: str, otel: Telemetry) -> None:
    topic = _topic(tansu, "otel-txn")
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name,
                       transactional_id=unique_topic("otel-tx")) as p:  # fmt: skip
        p.init_transactions()
        p.begin_transaction()
        futures = [p.send(topic, b"t%d" % i, partition=0) for i in range(3)]
        p.commit_transaction()
        offsets = [f.get(RESULT_S).offset for f in futures]
    assert _offsets_of(otel.sends()) == offsets


def test_opentelemetry_instrument_picks_shmkafka_up(tansu: Peer, pool_name: str) -> None:
    topic = _topic(tansu, "otel-auto")
    script = (
        "import sys\n"
        "from shmkafka.kafka import KafkaProducer\n"
        "with KafkaProducer(bootstrap_servers=sys.argv[1], pool=sys.argv[2]) as p:\n"
        "    p.send(sys.argv[3], b'auto').get(30)\n"
    )
    instrument = os.path.join(os.path.dirname(sys.executable), "opentelemetry-instrument")
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_LOGS_EXPORTER": "none"}  # fmt: skip
    out = subprocess.run([instrument, sys.executable, "-c", script, tansu.bootstrap, pool_name,
                          topic], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    exported = json.loads(out.stdout[out.stdout.index("{") :])
    assert exported["name"] == f"send {topic}" and exported["kind"] == "SpanKind.PRODUCER"
    assert exported["attributes"]["messaging.kafka.message.offset"] == 0
