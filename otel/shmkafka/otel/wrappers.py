"""The wrappers the instrumentor puts around each API's send call.

Rules:
- Each wrapper starts the record's span (telemetry.py), adds the trace context to the
  record's headers, calls the wrapped method, and ends the span when the record's result
  comes: a kafka-python future's done callback, a confluent delivery report (the record's
  own callback, or the producer's ``on_delivery``, which it then calls), an asyncio
  future's done callback. A call that raises ends its span at once, with the error.
- A record whose span is dropped while metrics record nothing gets no callback at all:
  after the call it costs nothing more.
- Arguments are read by name or position as the peer's signature gives them, and passed on
  by name, so a wrapper never changes what the wrapped call sees but the headers (and, for
  the confluent API, the report callback, which calls the user's).
- The producer's facts (client id, first bootstrap server, cluster id) are read from its
  pool client once per producer, the cluster id once the Sender learned it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from shmkafka.otel.semconv import Producer
from shmkafka.otel.telemetry import Send, Telemetry, error_type_of

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]

KAFKA_SEND = ("topic", "value", "key", "headers", "partition", "timestamp_ms")
CONFLUENT_PRODUCE = (  # (confluent-kafka's order: ``callback`` is ``on_delivery``'s alias)
    "topic", "value", "key", "partition", "on_delivery", "callback", "timestamp", "headers",
)  # fmt: skip
AIOKAFKA_SEND = ("topic", "value", "key", "partition", "timestamp_ms", "headers")


def bind(names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name (positional ones named as the signature does)."""
    if len(args) > len(names):
        raise TypeError(f"takes at most {len(names)} positional arguments ({len(args)} given)")
    bound = dict(zip(names, args, strict=False))
    for name, value in kwargs.items():
        if name in bound:
            raise TypeError(f"got multiple values for argument {name!r}")
        bound[name] = value
    if "topic" not in bound:
        raise TypeError("missing required argument: 'topic'")
    return bound


def producer_of(instance: Any) -> Producer:
    """The facts a span gives of ``instance``'s producer (cached on it once complete)."""
    known = instance.__dict__.get("_otel_producer")
    if known is not None:
        return known  # type: ignore[no-any-return]
    client = instance.shmkafka_client
    config = getattr(client, "config", None)
    if config is None:
        return Producer(None, None)
    cluster_id = client.known_cluster_id()
    facts = Producer(config.sender.client_id, config.sender.bootstrap_addresses()[0],
                     cluster_id)  # fmt: skip
    if cluster_id is not None:
        instance.__dict__["_otel_producer"] = facts
    return facts


def _started(
    telemetry: Telemetry, names: tuple[str, ...], instance: Any, args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[dict[str, Any], Send]:  # fmt: skip
    """The call's arguments by name, its record's span started and the trace context in
    its headers."""
    call = bind(names, args, kwargs)
    send = telemetry.start(call["topic"], call.get("key"), call.get("value"),
                           producer_of(instance))  # fmt: skip
    call["headers"] = send.headers(call.get("headers"))
    return call, send


def kafka_send(telemetry: Telemetry) -> Wrapper:
    """kafka-python's ``KafkaProducer.send``: the future's done callback ends the span."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:  # fmt: skip
        call, send = _started(telemetry, KAFKA_SEND, instance, args, kwargs)
        try:
            future = wrapped(**call)
        except BaseException as exc:
            send.failed(exc, error_type_of(exc))
            raise
        if send.wants_result:
            future.add_done_callback(lambda done: _future_done(send, done))
        return future

    return wrapper


def _future_done(send: Send, future: Any) -> None:
    if future.succeeded():
        metadata = future.value
        send.delivered(metadata.partition, metadata.offset)
    else:
        error = future.exception
        send.failed(error, error_type_of(error))


def confluent_produce(telemetry: Telemetry) -> Wrapper:
    """confluent-kafka's ``Producer.produce`` (and, beneath them, ``SerializingProducer``,
    ``AIOProducer`` and ``AsyncSerializingProducer``): the delivery report ends the span,
    at the time the record's result came (``Message.latency``), not when ``poll`` served it.
    AIOProducer's report is an asyncio future of the Message: its done callback ends it."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:  # fmt: skip
        call, send = _started(telemetry, CONFLUENT_PRODUCE, instance, args, kwargs)
        callback = call.pop("callback", None)
        report = callback or call.get("on_delivery") or getattr(instance, "_on_delivery", None)
        if isinstance(report, asyncio.Future):  # AIOProducer's: its Message is the result
            if send.wants_result:
                report.add_done_callback(lambda done: _asyncio_done(send, done, _message_at))
            call["on_delivery"] = report
        else:
            call["on_delivery"] = _report_ending(send, report) if send.wants_result else report
        try:
            return wrapped(**call)
        except BaseException as exc:
            send.failed(exc, error_type_of(exc))
            raise

    return wrapper


def _report_ending(send: Send, report: Callable[..., Any] | None) -> Callable[[Any, Any], None]:
    def on_delivery(error: Any, message: Any) -> None:
        partition, latency = message.partition(), message.latency()
        if error is None:
            send.delivered(partition, message.offset(), latency)
        else:
            send.failed(None, error.name(), partition, latency)
        if report is not None:
            report(error, message)

    return on_delivery


def aiokafka_send(telemetry: Telemetry) -> Wrapper:
    """aiokafka's ``AIOKafkaProducer.send`` (and ``send_and_wait``, which calls it): the
    returned asyncio future's done callback ends the span."""

    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:  # fmt: skip
        call, send = _started(telemetry, AIOKAFKA_SEND, instance, args, kwargs)
        try:
            future = await wrapped(**call)
        except BaseException as exc:
            send.failed(exc, error_type_of(exc))
            raise
        if send.wants_result:
            future.add_done_callback(lambda done: _asyncio_done(send, done, _metadata_at))
        return future

    return wrapper


Where = tuple[int | None, int | None, float | None]  # partition, offset, latency (s)


def _asyncio_done(send: Send, future: Any, where: Callable[[Any], Where]) -> None:
    """An asyncio future's outcome ends the span: ``where`` reads its result."""
    if future.cancelled():
        send.failed(None, "cancelled")
        return
    error = future.exception()
    if error is not None:
        send.failed(error, error_type_of(error))
        return
    send.delivered(*where(future.result()))


def _metadata_at(metadata: Any) -> Where:
    """aiokafka's RecordMetadata (None with acks=0: no answer to read them from)."""
    if metadata is None:
        return None, None, None
    return metadata.partition, metadata.offset, None


def _message_at(message: Any) -> Where:
    """confluent AIOProducer's delivered Message."""
    return message.partition(), message.offset(), message.latency()
