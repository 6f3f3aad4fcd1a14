"""``shmkafka.KafkaProducer``: kafka-python's ``KafkaProducer`` on the shared pool.

Change ``from kafka import KafkaProducer`` to ``from shmkafka import KafkaProducer``: the
arguments, the future, RecordMetadata and the errors are kafka-python's (3.x); records go
through this host's shared pool and its one Sender.

Rules:
- Every argument is checked before anything reaches shared memory; an unknown one is a
  ``KafkaConfigurationError`` naming it and the closest valid name.
- kafka-python arguments that do not apply here (sockets, SSL/SASL files with PLAINTEXT,
  metrics reporters...) are accepted and logged once.
- ``transactional_id``: the producer has a pool of its own (one per transactional id) and
  kafka-python's transactional methods (transactions.py).
- Defaults are kafka-python's, except that the pool's memory is bounded (``buffer_memory``,
  32 MiB, as in Java): a full pool blocks ``send`` up to ``max_block_ms``.
"""

from __future__ import annotations

import base64
import difflib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from shmkafka.facades.kafka_python import peer_errors
from shmkafka.facades.kafka_python.plugins import (
    ClusterView,
    DefaultPartitioner,
    Headers,
    choose_partition,
    is_default_partitioner,
    serialize,
)
from shmkafka.facades.kafka_python.transactions import KafkaTransactions
from shmkafka.pool.config import Config, normalize_bootstrap
from shmkafka.pool.errors import (
    IllegalArgumentError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaTimeoutError,
)
from shmkafka.producer.client import Client
from shmkafka.producer.entry import PARTITION_MURMUR2, EntryBinding, SendEntry
from shmkafka.producer.futures import Future
from shmkafka.producer.topics import check_topic, valid_topics
from shmkafka.producer.transactions import TransactionClient
from shmkafka.producer.views import MetricsWindow
from shmkafka.protocol.broker_errors import MessageSizeTooLargeError, UnknownTopicOrPartitionError
from shmkafka.protocol.records import record_size_bound

log = logging.getLogger("shmkafka.producer")
peer_errors.install()  # our errors are kafka-python's too, when it is installed

ACKS = {"all": -1, -1: -1, 0: 0, 1: 1, "0": 0, "1": 1, "-1": -1}
SENDER_ARGS = (
    "client_id", "acks", "compression_type", "compression_level", "linger_ms", "retries",
    "retry_backoff_ms", "retry_backoff_max_ms", "request_timeout_ms", "delivery_timeout_ms",
    "max_in_flight_requests_per_connection", "enable_idempotence", "metadata_max_age_ms",
    "metadata_max_idle_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms", "max_request_size",
    "transactional_id", "transaction_timeout_ms",
)  # fmt: skip
POOL_BATCH_BYTES = 1_000_000  # the pool's batches when batch_size is not given: they grow
POOL_ARGS = ("batch_size", "buffer_memory", "max_topics", "max_partitions", "max_processes",
             "lock_stripes", "batch_max_records", "pool_dir", "pool_durability",
             "pool_flush_ms")  # fmt: skip
DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "localhost",
    "client_id": None,
    "key_serializer": None,
    "value_serializer": None,
    "enable_idempotence": True,
    "transactional_id": None,
    "transaction_timeout_ms": 60_000,
    "delivery_timeout_ms": 120_000,
    "acks": -1,
    "compression_type": None,
    "compression_level": None,
    "retries": float("inf"),
    "batch_size": 16_384,  # kafka-python's (given: the most a pool's batch holds)
    "linger_ms": 0,
    "partitioner": None,
    "buffer_memory": 32 * 1024 * 1024,
    "max_block_ms": 60_000,
    "max_request_size": 1_048_576,
    "metadata_max_age_ms": 300_000,
    "metadata_max_idle_ms": 300_000,  # the Java client's: an idle topic is retired (shmkafka)
    "retry_backoff_ms": 100,
    "retry_backoff_max_ms": 1000,
    "request_timeout_ms": 30_000,
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 1000,
    "max_in_flight_requests_per_connection": 5,
    "security_protocol": "PLAINTEXT",
    "ssl_context": None,
    "ssl_check_hostname": True,
    "ssl_cafile": None,
    "ssl_certfile": None,
    "ssl_keyfile": None,
    "ssl_crlfile": None,
    "ssl_password": None,
    "ssl_ciphers": None,
    "sasl_mechanism": None,
    "sasl_plain_username": None,
    "sasl_plain_password": None,
    "sasl_oauth_token_provider": None,
    "api_version": None,
    "pool": None,
    "max_topics": 65536,
    "max_partitions": 1 << 20,
    "max_processes": 4096,
    "lock_stripes": 64,
    "batch_max_records": 0,  # (librdkafka's batch.num.messages; 0: no limit, as kafka-python)
    # a pool on a disk, and what survives the host (docs/reliability.md; shmkafka's own)
    "pool_dir": None,
    "pool_durability": "memory",
    "pool_flush_ms": 200,
    "sender_log": None,
}
# kafka-python arguments accepted and ignored: nothing they control exists here, or the
# value they take with PLAINTEXT has no effect.
IGNORED = frozenset({
    "connections_max_idle_ms", "allow_auto_create_topics",
    "client_dns_lookup", "receive_message_max_bytes", "receive_buffer_bytes",
    "send_buffer_bytes", "socket_options",
    "bootstrap_timeout_ms", "metric_reporters", "metrics_enabled", "metrics_num_samples",
    "metrics_sample_window_ms", "selector", "sasl_kerberos_name", "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name", "proxy_url", "socks5_proxy", "kafka_client",
})  # fmt: skip
_logged_ignored: set[str] = set()


def check_names(given: dict[str, Any], valid: set[str] | frozenset[str], what: str) -> None:
    for name in given:
        if name not in valid:
            close = difflib.get_close_matches(name, sorted(valid), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KafkaConfigurationError(f"unknown {what} {name!r}{hint}")


def log_ignored_once(names: list[str], client: str) -> None:
    fresh = [n for n in names if n not in _logged_ignored]
    if fresh:
        _logged_ignored.update(fresh)
        log.info("%s: accepted but not used by shmkafka: %s", client, ", ".join(sorted(fresh)))


API_VERSION = (0, 11)  # the oldest broker shmkafka talks to (RecordBatch v2, idempotence)
CODECS = (None, "gzip", "snappy", "lz4", "zstd")
_IDEMPOTENT_CONFLICTS = (
    ("acks", lambda v: ACKS[v] != -1),
    ("retries", lambda v: v == 0),
    ("max_in_flight_requests_per_connection", lambda v: v > 5),
)


def _resolve(config: dict[str, Any], given: set[str]) -> None:
    """kafka-python's resolution of the arguments, in place: ``acks='all'`` → -1, idempotence
    switched off (with a warning) or refused where other arguments conflict with it, and
    ``api_version`` a tuple."""
    if config["acks"] not in ACKS:
        raise KafkaConfigurationError(f"acks must be 0, 1, -1 or 'all', got {config['acks']!r}")
    if config["compression_type"] not in CODECS:
        raise KafkaConfigurationError(f"Not supported codec: {config['compression_type']}")
    version = config["api_version"]
    if isinstance(version, str):
        version = None if version == "auto" else tuple(int(p) for p in version.split("."))
    config["api_version"] = API_VERSION if version is None else tuple(version)
    explicit = "enable_idempotence" in given
    if config["transactional_id"] is not None:
        if explicit and not config["enable_idempotence"]:
            raise KafkaConfigurationError("Cannot set transactional_id without enable_idempotence.")
        config["enable_idempotence"] = True
    if config["enable_idempotence"]:
        conflicts = [
            f"{name}={config[name]!r}"
            for name, conflicting in _IDEMPOTENT_CONFLICTS
            if name in given and conflicting(config[name])
        ]
        if conflicts and explicit:
            raise KafkaConfigurationError(
                f"enable_idempotence=True is incompatible with user-provided {', '.join(conflicts)}"
            )
        if conflicts:
            log.warning(
                "Idempotence will be disabled because user-provided config conflicts with"
                " idempotent defaults: %s", ", ".join(conflicts),
            )  # fmt: skip
            config["enable_idempotence"] = False
    if config["enable_idempotence"] and config["api_version"] < (0, 11):
        if explicit:
            raise KafkaConfigurationError(
                "Idempotent/Transactional producer requires broker >= 0.11 "
                f"(got api_version={config['api_version']})"
            )
        config["enable_idempotence"] = False
    config["acks"] = ACKS[config["acks"]]
    config["client_id"] = config["client_id"] or "shmkafka"
    if config["delivery_timeout_ms"] < config["linger_ms"] + config["request_timeout_ms"]:
        raise KafkaConfigurationError(
            "Must set delivery_timeout_ms higher than linger_ms + request_timeout_ms"
        )
    if config["partitioner"] is None:
        config["partitioner"] = DefaultPartitioner()


def _security(config: dict[str, Any]) -> dict[str, Any]:
    """kafka-python's TLS and SASL arguments as the Sender's settings."""
    if config["ssl_context"] is not None:
        raise KafkaConfigurationError(
            "ssl_context cannot cross into the Sender process (it holds an SSLContext object): "
            "give ssl_cafile, ssl_certfile, ssl_keyfile, ssl_password, ssl_crlfile, "
            "ssl_ciphers and ssl_check_hostname instead"
        )
    protocol = str(config["security_protocol"]).upper()
    mechanism = config["sasl_mechanism"]
    if protocol.startswith("SASL_") and mechanism is None:
        raise KafkaConfigurationError(f"sasl_mechanism is required with {protocol}")
    if mechanism == "GSSAPI":
        raise KafkaConfigurationError("sasl_mechanism GSSAPI (Kerberos) is not supported")
    if mechanism == "OAUTHBEARER" and config["sasl_oauth_token_provider"] is None:
        raise KafkaConfigurationError("sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider")
    return {
        "security_protocol": protocol, "ssl_cafile": config["ssl_cafile"],
        "ssl_certfile": config["ssl_certfile"], "ssl_keyfile": config["ssl_keyfile"],
        "ssl_password": config["ssl_password"], "ssl_crlfile": config["ssl_crlfile"],
        "ssl_ciphers": config["ssl_ciphers"],
        "ssl_check_hostname": bool(config["ssl_check_hostname"]),
        "sasl_mechanism": mechanism or "PLAIN", "sasl_username": config["sasl_plain_username"],
        "sasl_password": config["sasl_plain_password"], "oauth_method": "callback",
    }  # fmt: skip


def _settings(config: dict[str, Any], given: set[str]) -> Config:
    """The pool's and the Sender's settings. Without ``batch_size`` given, the pool's
    batches grow with their partition's load up to POOL_BATCH_BYTES (``config`` reports
    kafka-python's 16384, as ``AIOKafkaProducer``'s reports aiokafka's)."""
    sender = {k: config[k] for k in SENDER_ARGS}
    sender.update(_security(config))
    sender["compression_type"] = config["compression_type"] or "none"
    retries = config["retries"]
    sender["retries"] = 2**31 - 1 if retries == float("inf") else retries
    sender["bootstrap_servers"] = normalize_bootstrap(config["bootstrap_servers"])
    pool = {k: config[k] for k in POOL_ARGS}
    pool["pool_dir"] = pool["pool_dir"] or ""
    if "batch_size" not in given:
        pool["batch_size"] = POOL_BATCH_BYTES
    return Config.build(sender, pool, config["pool"], config["max_block_ms"])


def resolved_config(configs: dict[str, Any]) -> dict[str, Any]:
    """The arguments checked, with the defaults, resolved as kafka-python resolves them."""
    check_names(configs, set(DEFAULTS) | IGNORED, "KafkaProducer argument")
    config = {**DEFAULTS, **{k: v for k, v in configs.items() if k in DEFAULTS}}
    _resolve(config, set(configs))
    return config


def settings_for(configs: dict[str, Any]) -> Config:
    """The pool and Sender settings ``KafkaProducer(**configs)`` asks for (a sidecar Sender
    creates its pool with them, so that such producers attach)."""
    return _settings(resolved_config(configs), set(configs))


class KafkaProducer(KafkaTransactions, SendEntry):
    """kafka-python's KafkaProducer, its records batched with every other process of the
    pool. ``pool=NAME`` picks the pool (default: one per distinct configuration)."""

    DEFAULT_CONFIG = DEFAULTS

    def __init__(self, **configs: Any) -> None:
        self.config = resolved_config(configs)
        log_ignored_once([n for n in configs if n in IGNORED], "KafkaProducer")
        self._init_args = dict(configs)
        for name in ("key_serializer", "value_serializer"):
            value = self.config[name]
            if value is not None and not callable(value) and not hasattr(value, "serialize"):
                raise KafkaConfigurationError(f"{name} must be callable, got {value!r}")
        chooser = self.config["partitioner"]
        if chooser is not None and not (callable(chooser) or hasattr(chooser, "partition")):
            raise KafkaConfigurationError(f"partitioner must be a Partitioner, got {chooser!r}")
        self._client = Client.open(
            _settings(self.config, set(configs)), sender_log=self.config["sender_log"]
        )
        provider = self.config["sasl_oauth_token_provider"]
        if provider is not None:
            self._client.token_provider = lambda: token_and_expiry(provider.token())
        self._closed = False
        self._max_size = self.config["max_request_size"]
        self._custom_partitioner = not is_default_partitioner(self.config["partitioner"])
        # what send()'s short path needs: no serializer, no custom partitioner, a size bound
        self._plain = (self.config["key_serializer"] is None and self.config["value_serializer"]
                       is None and not self._custom_partitioner)  # fmt: skip
        self._size_precheck = self._max_size - 1024  # (headroom for the record's frame)
        tid = self.config["transactional_id"]
        self._txn = None if tid is None else TransactionClient(self._handle, tid)
        self._c_plain = self._plain  # (the C entry: for a transactional one, in transactions)
        if self._txn is not None:
            self._plain = False  # (each send checks the transaction first: no short path)

    @classmethod
    def max_usable_produce_magic(cls, api_version: tuple[int, ...] | None = None) -> int:
        """The record format used: always RecordBatch v2 (magic 2), whatever is asked."""
        del api_version
        return 2

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for multiprocessing spawn/forkserver) as its arguments: the receiving
        process attaches to the same pool with its own slot."""
        return {"configs": self._init_args}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["configs"])  # type: ignore[misc]

    @property
    def _handle(self) -> Client:
        client = self._client = self._client.in_this_process()
        return client

    # ------------------------------------------------------------------ send

    def _send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        *,
        verdict: int | None = None,
    ) -> Future:
        """``send`` (entry.py: the common record is done in C): append one record; returns
        a future of RecordMetadata (kafka-python's). ``verdict``: see ``_send_verdict``."""
        if self._plain and headers is None and partition is None and timestamp_ms is None and (
            type(value) is bytes and (key is None or type(key) is bytes) and not self._closed
            and len(value) + (len(key) if key is not None else 0) < self._size_precheck
        ):  # fmt: skip
            # the common record (no serializers, bytes, no headers): a short path; the
            # checks it skips cannot fail for it, and handle.send checks the topic's name
            handle = self._client
            if topic in valid_topics and not handle.forked:
                future = handle.send(topic, value, key, verdict=verdict)
                self._enable_fast(handle)
                return future
        if self._closed:
            raise IllegalStateError("KafkaProducer already closed!")
        check_topic(topic)
        if value is None and key is None:
            raise ValueError("Need at least one: key or value")
        headers = _check_headers(headers)
        key_bytes = _serialized(self.config["key_serializer"], topic, headers, key, "key")
        value_bytes = _serialized(self.config["value_serializer"], topic, headers, value, "value")
        self._check_size(key_bytes, value_bytes, headers)
        if partition is not None and (not isinstance(partition, int) or partition < 0):
            raise IllegalArgumentError(f"partition must be an int >= 0, got {partition!r}")
        self._check_transactional_send()
        handle = self._handle
        if partition is None and self._custom_partitioner:
            partition = self._custom_partition(handle, topic, key, key_bytes, value, value_bytes)
        try:
            future = handle.send(topic, value_bytes, key_bytes, headers, partition, timestamp_ms,
                                 verdict=verdict)  # fmt: skip
            self._enable_fast(handle)
            return future
        except UnknownTopicOrPartitionError:
            raise IllegalArgumentError(
                f"Unrecognized partition {partition} for topic {topic}"
            ) from None

    def _send_verdict(self, verdict: int, *args: Any, **kwargs: Any) -> Future:
        """The record the C entry tried and left, nothing written (``verdict``: what it
        found, entry.py): ``send``'s Python path, which does not try C again."""
        return self._send(*args, verdict=verdict, **kwargs)

    def _enable_fast(self, handle: Client) -> None:
        """Let the C entry take the common record (entry.py), with this process's client."""
        if self._plain and not self._fast_enabled():
            self._bind_entry(handle)

    def _entry_binding(self) -> EntryBinding | None:
        return EntryBinding(PARTITION_MURMUR2, self._size_precheck) if self._c_plain else None

    def _entry_client(self) -> Client:
        return self._handle

    def _check_size(self, key: Any, value: Any, headers: list[tuple[str, bytes]]) -> None:
        size = record_size_bound(key, value, headers)  # the accumulator's own bound
        if size > self._max_size:
            raise MessageSizeTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the "
                f"maximum request size you have configured with the max_request_size "
                f"configuration ({self._max_size})"
            )

    def _custom_partition(
        self, handle: Client, topic: str, key: Any, key_bytes: bytes | None,
        value: Any, value_bytes: bytes | None,
    ) -> int:  # fmt: skip
        count = handle.partitions_for(topic)
        snapshot = handle.cluster_view()
        cluster = ClusterView({t: [e.leader for e in es] for t, es in snapshot.topics.items()})
        chosen = choose_partition(
            self.config["partitioner"], topic, key, key_bytes, value, value_bytes, cluster
        )
        if chosen is None:
            raise ValueError(f"Partitioner did not assign a partition for topic {topic}!")
        if not isinstance(chosen, int) or not 0 <= chosen < count:
            raise ValueError(f"Unrecognized partition {chosen!r} for topic {topic}")
        return chosen

    # ------------------------------------------------------------------ the rest

    def flush(self, timeout: float | None = None) -> None:
        """Send everything now (ignoring linger) and wait until every record is done."""
        if self._closed:
            return
        self._handle.flush(timeout)

    def close(self, timeout: float | None = None, null_logger: bool = False) -> None:
        """Deliver what is pending (up to ``timeout`` s), then detach. ``close(0)`` fails
        the pending futures at once; their records stay in the pool for the Sender. A second
        call does nothing."""
        del null_logger
        if timeout is not None and not 0 <= timeout <= threading.TIMEOUT_MAX:
            raise ValueError(f"Invalid timeout: {timeout}")
        if self._closed:
            return
        if self._txn is not None:
            self._txn.end_on_close(timeout)
        self._closed = True
        self._fast_disable()
        handle = self._handle
        try:
            if timeout is not None and timeout <= 0:
                handle.fail_pending(KafkaTimeoutError("the producer was closed with close(0)"))
            else:
                handle.flush(timeout)
        except KafkaTimeoutError:
            handle.fail_pending(KafkaTimeoutError(f"the producer was closed after {timeout} s"))
        finally:
            handle.close(0)
        for name in ("key_serializer", "value_serializer"):  # last, as kafka-python
            closer = getattr(self.config[name], "close", None)
            if callable(closer):
                closer()

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partition ids (waits up to ``max_block_ms`` for metadata)."""
        return set(range(self._handle.partitions_for(topic)))

    def bootstrap_connected(self) -> bool:
        """True once the pool's Sender runs and has heard from the cluster (a producer id,
        or topic metadata, in the pool)."""
        handle = self._handle
        return handle.sender_running() and handle.heard_from_cluster()

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """The pool's metrics under the Java client's names (pool/metrics.py), and this
        process's ``records-pending``. Rates and averages are over the calls of the last
        30 s (the first call has none: 0.0)."""
        del raw
        handle = self._handle
        # One window and lock per process (threads may ask; a call is rare and short): a
        # forked child's start afresh, and never wait on a lock a thread of the parent held
        # at the fork. (setdefault is atomic under the GIL.)
        by_pid: dict[int, tuple[threading.Lock, MetricsWindow]]
        by_pid = self.__dict__.setdefault("_metrics_by_pid", {})
        lock, window = by_pid.setdefault(os.getpid(), (threading.Lock(), MetricsWindow()))
        with lock:
            last = window.samples[-1] if window.samples else None
            window.add(handle.metrics_sample(previous=last))
            values = window.metrics()
        values["records-pending"] = float(handle.outstanding)
        return {"producer-metrics": {k: float(v) for k, v in values.items()}}


def token_and_expiry(token: str) -> tuple[str, int]:
    """A kafka-python token provider gives a token only: its JWT ``exp`` if it has one,
    else an hour from now (the Sender asks again at 80% of it)."""
    try:
        body = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        return token, int(float(claims["exp"]) * 1000)
    except (IndexError, ValueError, KeyError, TypeError):
        return token, int(time.time() * 1000) + 3_600_000


def _serialized(serializer: Any, topic: str, headers: Headers, data: Any, what: str) -> Any:
    data = serialize(serializer, topic, headers, data)
    if data is not None and not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"Unsupported type for serialized {what}: {type(data)}")
    return bytes(data) if isinstance(data, bytearray | memoryview) else data


def _check_headers(headers: Any) -> list[tuple[str, bytes]]:
    if headers is None:
        return []
    if not isinstance(headers, list):
        raise TypeError("headers must be list-type")
    for item in headers:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError("All headers items must be (str, bytes) tuples")
        if item[1] is not None and not isinstance(item[1], bytes):
            raise TypeError("All headers items must be (str, bytes) tuples")
    return headers


Partitioner = Callable[[Any, list[int], list[int]], int]
__all__ = ["KafkaProducer", "Partitioner", "UnknownTopicOrPartitionError"]
