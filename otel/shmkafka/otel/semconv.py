"""The names a send span and the messaging metrics carry: OpenTelemetry's messaging semantic
conventions, Kafka page, in the two versions the contrib instrumentations know.

Rules:
- ``OTEL_SEMCONV_STABILITY_OPT_IN`` (comma-separated) chooses, read once per instrumentation:
  ``messaging`` the current names only, ``messaging/dup`` both, anything else the older
  names (the default, as the contrib packages keep it until the conventions are stable).
- Span name and kind do not change with it: ``send {topic}``, PRODUCER.
- A key is an attribute only when it has a text form (UTF-8 bytes or a str); a None key is
  never one (the conventions say so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from typing import Any

from shmkafka.shm.rings import SenderView

SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
KEY = "messaging.kafka.message.key"
CLUSTER_ID = "messaging.kafka.cluster.id"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

# the current names
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
PARTITION_ID = "messaging.destination.partition.id"  # a string
OFFSET = "messaging.kafka.offset"
CLIENT_ID = "messaging.client.id"
BODY_SIZE = "messaging.message.body.size"

# the older names (semantic conventions up to 1.24, as the contrib packages emit them)
OLD_OPERATION = "messaging.operation"
OLD_PARTITION = "messaging.kafka.destination.partition"  # an int
OLD_OFFSET = "messaging.kafka.message.offset"
OLD_CLIENT_ID = "messaging.client_id"
OLD_BODY_SIZE = "messaging.message.payload_size_bytes"

# shmkafka's own: the Sender's view of the record's batch (shm/rings.py's SenderView)
RETRIES = "shmkafka.batch.retries"  # produce requests that carried the batch, less one
NODE_ID = "shmkafka.broker.node.id"  # the broker node of the last one
QUEUED_MS = "shmkafka.batch.queued_ms"  # from the batch's creation to the last request
REQUEST_MS = "shmkafka.request.duration_ms"  # the last request's round trip

# the metrics
SENT_MESSAGES = "messaging.client.sent.messages"
OPERATION_DURATION = "messaging.client.operation.duration"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Names(Enum):
    OLD = "old"
    NEW = "new"
    BOTH = "both"


def names_chosen(environ: dict[str, str] | None = None) -> Names:
    """Which names ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for (``messaging/dup`` wins)."""
    raw = (environ if environ is not None else os.environ).get("OTEL_SEMCONV_STABILITY_OPT_IN")
    chosen = {part.strip() for part in (raw or "").split(",")}
    if "messaging/dup" in chosen:
        return Names.BOTH
    return Names.NEW if "messaging" in chosen else Names.OLD


def key_text(key: Any) -> str | None:
    """A key's text form, or None when it has none."""
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        try:
            return bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


@dataclass(frozen=True)
class Producer:
    """What a send span says of the producer that made it."""

    client_id: str | None
    server: tuple[str, int] | None  # the first bootstrap server
    cluster_id: str | None = None


def head_attributes(topic: str) -> dict[str, Any]:
    """What a send span starts with, for its sampler: the system and the destination."""
    return {SYSTEM: "kafka", DESTINATION: topic}


def send_attributes(
    names: Names, topic: str, key: Any, body_size: int | None, producer: Producer
) -> dict[str, Any]:
    """The attributes a send span starts with."""
    out: dict[str, Any] = {SYSTEM: "kafka", DESTINATION: topic}
    text = key_text(key)
    if text is not None:
        out[KEY] = text
    if producer.server is not None:
        out[SERVER_ADDRESS], out[SERVER_PORT] = producer.server
    if producer.cluster_id:
        out[CLUSTER_ID] = producer.cluster_id
    if names is not Names.NEW:
        out[OLD_OPERATION] = "publish"
        if producer.client_id:
            out[OLD_CLIENT_ID] = producer.client_id
        if body_size is not None:
            out[OLD_BODY_SIZE] = body_size
    if names is not Names.OLD:
        out[OPERATION_NAME] = out[OPERATION_TYPE] = "send"
        if producer.client_id:
            out[CLIENT_ID] = producer.client_id
        if body_size is not None:
            out[BODY_SIZE] = body_size
    return out


def delivery_attributes(names: Names, partition: int | None, offset: int | None) -> dict[str, Any]:
    """The attributes a send span ends with, once the record is delivered (or failed)."""
    out: dict[str, Any] = {}
    if partition is not None and partition >= 0:
        if names is not Names.NEW:
            out[OLD_PARTITION] = partition
        if names is not Names.OLD:
            out[PARTITION_ID] = str(partition)
    if offset is not None and offset >= 0:
        if names is not Names.NEW:
            out[OLD_OFFSET] = offset
        if names is not Names.OLD:
            out[OFFSET] = offset
    return out


def sender_view_attributes(view: SenderView) -> dict[str, Any]:
    """The Sender's view of the record's batch, as span attributes (what is known)."""
    out: dict[str, Any] = {RETRIES: max(0, view.attempts - 1)}
    if view.node_id >= 0:
        out[NODE_ID] = view.node_id
    if view.queued_ms >= 0:
        out[QUEUED_MS] = view.queued_ms
    if view.request_ms >= 0:
        out[REQUEST_MS] = view.request_ms
    return out


def duration_attributes(topic: str, error_type: str | None, producer: Producer) -> dict[str, Any]:
    """The duration histogram's attributes: the counter's but the partition and the port
    (recommended, not required: the SDK checks and hashes each one at every measurement)."""
    out: dict[str, Any] = {SYSTEM: "kafka", OPERATION_NAME: "send", DESTINATION: topic}
    if producer.server is not None:
        out[SERVER_ADDRESS] = producer.server[0]
    if error_type is not None:
        out[ERROR_TYPE] = error_type
    return out


def metric_attributes(topic: str, partition: int | None, error_type: str | None,
                      producer: Producer) -> dict[str, Any]:  # fmt: skip
    """The attributes of one record's metric points (the conventions' metric attributes)."""
    out: dict[str, Any] = {
        SYSTEM: "kafka", OPERATION_NAME: "send", DESTINATION: topic,
    }  # fmt: skip
    if partition is not None and partition >= 0:
        out[PARTITION_ID] = str(partition)
    if producer.server is not None:
        out[SERVER_ADDRESS], out[SERVER_PORT] = producer.server
    if error_type is not None:
        out[ERROR_TYPE] = error_type
    return out
