"""The confluent-kafka ``Producer``'s configuration: librdkafka property names mapped onto
shmkafka's settings, with librdkafka's defaults where they fit a shared pool.

Rules:
- A property in ``SUPPORTED`` is converted and validated; a bad value is an
  ``_INVALID_ARG`` error naming the property.
- A property in ``IGNORED`` is a valid librdkafka property that has no effect here: it is
  accepted and logged once. Anything else is unknown: ``_INVALID_ARG`` naming it and the
  closest valid name.
- Different defaults from librdkafka's, because a batch is a fixed slab of shared memory:
  ``batch.size`` 16384 (librdkafka 1000000), ``queue.buffering.max.kbytes`` 32768
  (librdkafka 1048576), ``max.in.flight`` 5 (librdkafka 1000000).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any


class ConfigValueError(ValueError):
    """A property or value is not accepted; the message names it (→ ``_INVALID_ARG``)."""


def _int(name: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigValueError(f"{name}: expected an integer, got {value!r}") from None
    if isinstance(value, float) and value != number:
        raise ConfigValueError(f"{name}: expected an integer, got {value!r}")
    return number


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigValueError(f"{name}: expected true or false, got {value!r}")


def _acks(name: str, value: Any) -> int:
    text = str(value).lower()
    if text == "all" or text == "-1":
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ConfigValueError(f"{name}: expected all, -1, 0 or 1, got {value!r}")


def _servers(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigValueError(f"{name}: expected HOST:PORT[,HOST:PORT...], got {value!r}")
    return value


def _codec(name: str, value: Any) -> str:
    text = str(value).lower()
    if text not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise ConfigValueError(f"{name}: expected none, gzip, snappy, lz4 or zstd, got {value!r}")
    return text


PARTITIONERS = (
    "random", "consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a",
    "fnv1a_random",
)  # fmt: skip


def _partitioner(name: str, value: Any) -> str:
    if value not in PARTITIONERS:
        raise ConfigValueError(f"{name}: expected one of {', '.join(PARTITIONERS)}, got {value!r}")
    return str(value)


def _callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise ConfigValueError(f"{name}: expected a callable, got {value!r}")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigValueError(f"{name}: expected a string, got {value!r}")
    return value


def _plaintext(name: str, value: Any) -> str:
    if str(value).lower() != "plaintext":
        raise ConfigValueError(f"{name}: only plaintext is supported, got {value!r}")
    return "plaintext"


Converter = Callable[[str, Any], Any]
# librdkafka property → (setting name, converter). Aliases map onto the same setting.
SUPPORTED: dict[str, tuple[str, Converter]] = {
    "bootstrap.servers": ("bootstrap_servers", _servers),
    "metadata.broker.list": ("bootstrap_servers", _servers),
    "client.id": ("client_id", _text),
    "acks": ("acks", _acks),
    "request.required.acks": ("acks", _acks),
    "linger.ms": ("linger_ms", _int),
    "queue.buffering.max.ms": ("linger_ms", _int),
    "batch.size": ("batch_size", _int),
    "compression.type": ("compression_type", _codec),
    "compression.codec": ("compression_type", _codec),
    "compression.level": ("compression_level", _int),
    "enable.idempotence": ("enable_idempotence", _bool),
    "message.timeout.ms": ("delivery_timeout_ms", _int),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "retries": ("retries", _int),
    "message.send.max.retries": ("retries", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "retry.backoff.max.ms": ("retry_backoff_max_ms", _int),
    "max.in.flight": ("max_in_flight_requests_per_connection", _int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _int),
    "message.max.bytes": ("max_request_size", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _int),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _int),
    "queue.buffering.max.kbytes": ("buffer_kbytes", _int),
    "queue.buffering.max.messages": ("max_messages", _int),
    "partitioner": ("partitioner", _partitioner),
    "delivery.report.only.error": ("report_only_errors", _bool),
    "security.protocol": ("security_protocol", _plaintext),
    "error_cb": ("error_cb", _callable),
    "stats_cb": ("stats_cb", _callable),
    "on_delivery": ("on_delivery", _callable),
    "dr_msg_cb": ("on_delivery", _callable),
    "dr_cb": ("on_delivery", _callable),
    "logger": ("logger", lambda _, v: v),
    "statistics.interval.ms": ("statistics_interval_ms", _int),
    # shmkafka's own: the pool and its sizes
    "shmkafka.pool": ("pool", _text),
    "shmkafka.max.topics": ("max_topics", _int),
    "shmkafka.max.partitions": ("max_partitions", _int),
    "shmkafka.max.processes": ("max_processes", _int),
    "shmkafka.sender.log": ("sender_log", _text),
}

# Valid librdkafka (global and topic) properties without an effect here.
IGNORED = frozenset({
    "api.version.request", "api.version.request.timeout.ms", "api.version.fallback.ms",
    "broker.version.fallback", "allow.auto.create.topics", "broker.address.family",
    "broker.address.ttl", "client.dns.lookup", "client.rack", "connections.max.idle.ms",
    "debug", "enable.gapless.guarantee", "enable.random.seed",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "enable.ssl.certificate.verification", "enabled_events", "internal.termination.signal",
    "log.connection.close", "log.queue", "log.thread.name", "log_cb", "log_level",
    "message.copy.max.bytes", "metadata.max.age.ms.topic", "metadata.request.timeout.ms",
    "opaque", "queue.buffering.backpressure.threshold", "receive.message.max.bytes",
    "sasl.kerberos.keytab", "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal", "sasl.kerberos.service.name", "sasl.mechanism",
    "sasl.mechanisms", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config", "sasl.oauthbearer.method", "sasl.oauthbearer.scope",
    "sasl.oauthbearer.token.endpoint.url", "sasl.password", "sasl.username",
    "socket.blocking.max.ms", "socket.connection.setup.timeout.ms", "socket.keepalive.enable",
    "socket.max.fails", "socket.nagle.disable", "socket.receive.buffer.bytes",
    "socket.send.buffer.bytes", "socket.timeout.ms", "ssl.ca.location", "ssl.certificate.location",
    "ssl.cipher.suites", "ssl.endpoint.identification.algorithm", "ssl.key.location",
    "ssl.key.password", "sticky.partitioning.linger.ms", "throttle_cb",
    "topic.blacklist", "topic.metadata.propagation.max.ms",
    "topic.metadata.refresh.fast.interval.ms",
    "topic.metadata.refresh.interval.ms", "topic.metadata.refresh.sparse",
    "transaction.timeout.ms", "batch.num.messages", "queue.buffering.max.messages.per.partition",
    "message.timeout.ms.per.topic", "produce.offset.report", "queuing.strategy",
    "msg_order_cmp", "partitioner_cb", "compression.level.per.topic",
    "retry.backoff.jitter", "ssl.providers", "ssl.engine.location", "ssl_key", "ssl.sigalgs.list",
})  # fmt: skip
REJECTED = {"transactional.id": "transactions are not supported"}

DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": None,
    "client_id": "rdkafka",
    "acks": -1,
    "linger_ms": 5,
    "batch_size": 16384,
    "compression_type": "none",
    "compression_level": -1,
    "enable_idempotence": False,
    "delivery_timeout_ms": 300_000,
    "request_timeout_ms": 30_000,
    "retries": 2_147_483_647,
    "retry_backoff_ms": 100,
    "retry_backoff_max_ms": 1000,
    "max_in_flight_requests_per_connection": 5,
    "max_request_size": 1_000_000,
    "metadata_max_age_ms": 900_000,
    "reconnect_backoff_ms": 100,
    "reconnect_backoff_max_ms": 10_000,
    "buffer_kbytes": 32 * 1024,
    "max_messages": 100_000,
    "partitioner": "consistent_random",
    "report_only_errors": False,
    "security_protocol": "plaintext",
    "error_cb": None,
    "stats_cb": None,
    "on_delivery": None,
    "logger": None,
    "statistics_interval_ms": 0,
    "pool": None,
    "max_topics": 256,
    "max_partitions": 1024,
    "max_processes": 64,
    "sender_log": None,
}


def parse(conf: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """librdkafka properties → settings (DEFAULTS' names) and the ignored properties."""
    settings = dict(DEFAULTS)
    ignored = []
    for name, value in conf.items():
        if not isinstance(name, str):
            raise ConfigValueError(f"property names are strings, got {name!r}")
        if name in REJECTED:
            raise ConfigValueError(f"{name}: {REJECTED[name]}")
        if name in IGNORED:
            ignored.append(name)
            continue
        if name not in SUPPORTED:
            close = difflib.get_close_matches(name, sorted(SUPPORTED) + sorted(IGNORED), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigValueError(f"No such configuration property: {name!r}{hint}")
        key, convert = SUPPORTED[name]
        settings[key] = convert(name, value)
    if settings["bootstrap_servers"] is None:
        raise ConfigValueError("bootstrap.servers is required")
    if settings["enable_idempotence"]:  # as librdkafka: idempotence forces these
        settings.update(acks=-1, max_in_flight_requests_per_connection=5)
    return settings, ignored
