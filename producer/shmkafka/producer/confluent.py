"""``shmkafka.Producer``: confluent-kafka's ``Producer`` on the shared pool.

Change ``from confluent_kafka import Producer`` to ``from shmkafka import Producer``:
``Producer(conf)`` takes librdkafka's properties (see confluent_config.py), ``produce`` never
blocks, and delivery reports are served by ``poll()`` / ``flush()`` in the calling thread.

Rules:
- Delivery reports are queued by the completion thread in offset order per batch (so in
  order per partition) and served only from ``poll``/``flush``; an exception raised by a
  callback propagates out of that call, as in confluent-kafka.
- ``produce`` raises ``BufferError`` when ``queue.buffering.max.messages`` records are
  pending (counting reports not yet served) or when the pool has no memory right now.
- A record for a topic not yet in the pool's directory waits in this process (librdkafka's
  unassigned queue) until the Sender has its metadata; it fails with ``_MSG_TIMED_OUT``
  after ``message.timeout.ms``.
"""

from __future__ import annotations

import builtins
import json
import logging
import random
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

from shmkafka.errors import (
    KafkaConfigurationError,
    KafkaTimeoutError,
    MemoryExhaustedError,
    MessageSizeTooLargeError,
)
from shmkafka.producer import confluent_config
from shmkafka.producer.engine import Engine, Settings, check_topic
from shmkafka.producer.futures import Future
from shmkafka.producer.handle import ProducerHandle
from shmkafka.producer.settings import normalize_bootstrap
from shmkafka.protocol.broker_errors import for_code
from shmkafka.protocol.errors import KafkaError as ProtocolKafkaError
from shmkafka.protocol.hashing import murmur2_partition

log = logging.getLogger("shmkafka.producer")

TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME = 0, 1, 2


class KafkaError:
    """confluent-kafka's error object: ``code()``, ``name()``, ``str()``, ``retriable()``,
    ``fatal()``; it compares equal to its code."""

    _MSG_TIMED_OUT, _QUEUE_FULL, _PURGE_QUEUE, _PURGE_INFLIGHT = -192, -184, -152, -151
    _INVALID_ARG, _UNKNOWN_PARTITION, _UNKNOWN_TOPIC, _TIMED_OUT = -186, -190, -188, -185
    _STATE, _FAIL = -172, -196
    MSG_SIZE_TOO_LARGE, UNKNOWN_TOPIC_OR_PART = 10, 3

    def __init__(
        self, code: int, reason: str | None = None, *, fatal: bool = False, retriable: bool = False
    ) -> None:
        self._code = code
        name, text = _LOCAL.get(code, (None, None))
        if name is None:
            broker = for_code(code)
            name, text = broker.name, broker.description or broker.name
        self._name = name
        self._str = reason or text or name
        self._fatal = fatal
        self._retriable = retriable

    @classmethod
    def from_exception(cls, error: BaseException) -> KafkaError:
        if isinstance(error, KafkaTimeoutError):
            return cls(cls._MSG_TIMED_OUT)
        code = getattr(error, "error_code", None)
        if code is None:
            return cls(cls._FAIL, str(error))
        return cls(code, str(error), retriable=bool(getattr(error, "retriable", False)))

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return self._name

    def str(self) -> builtins.str:
        return self._str

    def retriable(self) -> bool:
        return self._retriable

    def fatal(self) -> bool:
        return self._fatal

    def txn_requires_abort(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        return isinstance(other, int) and self._code == other

    def __hash__(self) -> int:
        return hash(self._code)

    def __str__(self) -> builtins.str:
        return self._str

    def __repr__(self) -> builtins.str:
        return f'KafkaError{{code={self._name},val={self._code},str="{self._str}"}}'


# librdkafka's local error codes used here, by their names in KafkaError: (name, description)
_LOCAL_TEXT = {
    KafkaError._MSG_TIMED_OUT: "Local: Message timed out",
    KafkaError._QUEUE_FULL: "Local: Queue full",
    KafkaError._PURGE_QUEUE: "Local: Purged in queue",
    KafkaError._PURGE_INFLIGHT: "Local: Purged in flight",
    KafkaError._INVALID_ARG: "Local: Invalid argument or configuration",
    KafkaError._UNKNOWN_PARTITION: "Local: Unknown partition",
    KafkaError._UNKNOWN_TOPIC: "Local: Unknown topic",
    KafkaError._TIMED_OUT: "Local: Timed out",
    KafkaError._STATE: "Local: Erroneous state",
    KafkaError._FAIL: "Local: Failed",
}
_LOCAL = {
    code: (name, _LOCAL_TEXT[code])
    for name, code in vars(KafkaError).items()
    if name.startswith("_") and isinstance(code, int) and code in _LOCAL_TEXT
}


class KafkaException(Exception):
    """confluent-kafka's exception: ``args[0]`` is the KafkaError."""

    def __init__(self, error: KafkaError | int, reason: str | None = None) -> None:
        if isinstance(error, int):
            error = KafkaError(error, reason)
        super().__init__(error)


class Message:
    """A delivered (or failed) record, as confluent-kafka's delivery reports give it."""

    __slots__ = ("_error", "_future", "_headers", "_key", "_latency", "_topic", "_value")

    def __init__(
        self, future: Future | None, topic: str, key: Any, value: Any, headers: Any,
        error: KafkaError | None, latency: float | None,
    ) -> None:  # fmt: skip
        self._future, self._topic, self._key, self._value = future, topic, key, value
        self._headers, self._error, self._latency = headers, error, latency

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._future.partition if self._future is not None else -1

    def offset(self) -> int:
        value = self._future.value if self._future is not None else None
        return value.offset if value is not None else -1001  # librdkafka's OFFSET_INVALID

    def timestamp(self) -> tuple[int, int]:
        value = self._future.value if self._future is not None else None
        if value is None:
            return (TIMESTAMP_NOT_AVAILABLE, -1)
        return (TIMESTAMP_CREATE_TIME, value.timestamp)

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error

    def latency(self) -> float | None:
        return self._latency

    def __len__(self) -> int:
        return len(self._value) if self._value is not None else 0


def _fnv1a(key: bytes) -> int:
    h = 0x811C9DC5
    for byte in key:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _encode(what: str, data: Any) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be str, bytes or None, got {type(data).__name__}")


def _headers(headers: Any) -> list[tuple[str, bytes | None]]:
    if headers is None:
        return []
    items = list(headers.items()) if isinstance(headers, dict) else headers
    if not isinstance(items, list | tuple):
        raise TypeError("headers must be a dict or a list of (str, bytes|str|None) tuples")
    out = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str):
            raise TypeError(f"header {item!r} is not a (str, bytes|str|None) tuple")
        out.append((item[0], _encode("header value", item[1])))
    return out


def _confluent_exception(exc: ProtocolKafkaError) -> Exception:
    """A shmkafka error as confluent-kafka raises it: ``BufferError`` when the pool has no
    memory now, ``KafkaException`` for everything else."""
    if isinstance(exc, MemoryExhaustedError):
        return BufferError("Local: Queue full")
    if isinstance(exc, MessageSizeTooLargeError):
        return KafkaException(KafkaError.MSG_SIZE_TOO_LARGE, str(exc))
    if isinstance(exc, KafkaConfigurationError):
        return KafkaException(KafkaError._INVALID_ARG, str(exc))
    if isinstance(exc, KafkaTimeoutError):
        return KafkaException(KafkaError._TIMED_OUT, str(exc))
    return KafkaException(KafkaError.from_exception(exc))


class _ConfluentErrors:
    """``with _confluent_errors:`` what is raised inside leaves as ``_confluent_exception``
    says (``produce`` uses a try instead: it is the per-record path)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> None:  # fmt: skip
        if isinstance(exc, ProtocolKafkaError):
            raise _confluent_exception(exc) from None


_confluent_errors = _ConfluentErrors()


class Producer:
    """confluent-kafka's Producer, its records batched with every other process of the
    pool (``shmkafka.pool`` picks it; default: one per distinct configuration)."""

    def __init__(self, conf: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if conf is not None and not isinstance(conf, dict):
            raise TypeError(f"expected configuration dict, got {type(conf).__name__}")
        conf = {**(conf or {}), **kwargs}
        try:
            s, ignored = confluent_config.parse(conf)
            self._settings = s
            settings = Settings.build(self._sender_settings(s), self._pool_settings(s),
                                      s["pool"], max_block_ms=0)  # fmt: skip
        except (confluent_config.ConfigValueError, ProtocolKafkaError) as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, str(exc))) from None
        from shmkafka.producer.kafka_python import log_ignored_once

        log_ignored_once(ignored, "Producer")
        self._conf = conf
        with _confluent_errors:
            self._engine = Engine(settings, sender_log=s["sender_log"])
        # (future or None, (topic, report), error for a record that never reached the pool)
        self._reports: deque[tuple[Future | None, Any, KafkaError | None]] = deque()
        self._reports_ready = threading.Condition()
        self._unassigned: deque[tuple[str, Any, Any, Any, int, Any, float]] = deque()
        self._closed = False
        self._attach(self._engine.handle)

    @staticmethod
    def _sender_settings(s: dict[str, Any]) -> dict[str, Any]:
        keys = ("client_id", "acks", "linger_ms", "enable_idempotence", "delivery_timeout_ms",
                "request_timeout_ms", "retries", "retry_backoff_ms", "retry_backoff_max_ms",
                "max_in_flight_requests_per_connection", "max_request_size",
                "metadata_max_age_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms",
                "compression_type")  # fmt: skip
        out = {k: s[k] for k in keys}
        out["compression_level"] = None if s["compression_level"] == -1 else s["compression_level"]
        out["bootstrap_servers"] = normalize_bootstrap(s["bootstrap_servers"])
        return out

    @staticmethod
    def _pool_settings(s: dict[str, Any]) -> dict[str, Any]:
        return {
            "batch_size": s["batch_size"], "buffer_memory": s["buffer_kbytes"] * 1024,
            "max_topics": s["max_topics"], "max_partitions": s["max_partitions"],
            "max_processes": s["max_processes"],
        }  # fmt: skip

    def _attach(self, handle: ProducerHandle) -> ProducerHandle:
        handle.on_done = self._queue_reports
        return handle

    @property
    def _handle(self) -> ProducerHandle:
        handle = self._engine.handle
        if handle.on_done is None:  # re-made after fork
            self._attach(handle)
            self._reports.clear()
            self._unassigned.clear()
        return handle

    def _queue_reports(self, futures: list[Future]) -> None:
        """The completion thread's hook: queue a report per future that asked for one."""
        only_errors = self._settings["report_only_errors"]
        with self._reports_ready:
            for future in futures:
                if future.report is not None and not (only_errors and future.succeeded()):
                    self._reports.append((future, (future.topic, future.report), None))
            self._reports_ready.notify_all()

    def __getstate__(self) -> dict[str, Any]:
        return {"conf": self._conf}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["conf"])  # type: ignore[misc]

    # ------------------------------------------------------------------ produce

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Callable[..., Any] | None = None,
        callback: Callable[..., Any] | None = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        self._check_open()
        check_topic(topic)
        value_bytes, key_bytes = _encode("value", value), _encode("key", key)
        header_list = _headers(headers)
        if not isinstance(partition, int) or partition < -1:
            raise KafkaException(KafkaError._INVALID_ARG, f"invalid partition {partition!r}")
        if len(self) >= self._settings["max_messages"]:
            raise BufferError("Local: Queue full")
        report = (callback or on_delivery or self._settings["on_delivery"], key, value, headers,
                  time.monotonic())  # fmt: skip
        try:  # (not a with block: this is the per-record path, and a try costs nothing)
            self._serve_unassigned()
            handle = self._handle
            entries = handle.pool.directory.partitions(topic)
            if entries is None:
                handle.request_topic(topic)
                deadline = time.monotonic() + self._settings["delivery_timeout_ms"] / 1000
                self._unassigned.append(
                    (topic, value_bytes, key_bytes, header_list, partition, report, deadline)
                )
                return
            self._append(handle, topic, value_bytes, key_bytes, header_list, partition,
                         timestamp, report, len(entries))  # fmt: skip
        except ProtocolKafkaError as exc:
            raise _confluent_exception(exc) from None

    def _append(self, handle: ProducerHandle, topic: str, value: bytes | None, key: bytes | None,
                headers: list[tuple[str, bytes | None]], partition: int, timestamp: int,
                report: Any, count: int) -> None:  # fmt: skip
        chosen = self._partition(topic, key, count) if partition == -1 else partition
        if chosen is not None and chosen >= count:
            raise KafkaException(KafkaError._UNKNOWN_PARTITION, f"{topic} [{partition}]")
        future = handle.send(topic, value, key, headers, chosen, timestamp or None)
        future.report = report
        if report[0] is not None and future.is_done and not handle.on_done:
            self._queue_reports([future])

    def _partition(self, topic: str, key: bytes | None, count: int) -> int | None:
        """librdkafka's partitioners; None = the pool's sticky choice for a null key."""
        name = self._settings["partitioner"]
        randomly = name == "random" or key is None or (key == b"" and name == "consistent_random")
        if randomly and (name == "random" or name.endswith("_random")):
            return None if key is None else random.randrange(count)
        key = key or b""  # librdkafka maps null keys of the plain hashes to one partition
        if name.startswith("consistent"):
            return zlib.crc32(key) % count
        if name.startswith("murmur2"):
            return murmur2_partition(key, count)
        h = _fnv1a(key)  # librdkafka: the absolute value of the hash as a signed int32
        return abs(h - 0x100000000 if h & 0x80000000 else h) % count

    def _serve_unassigned(self) -> None:
        """Append records whose topic is now known; time out those waiting too long."""
        if not self._unassigned:
            return
        handle = self._engine.handle
        now = time.monotonic()
        waiting: deque[tuple[str, Any, Any, Any, int, Any, float]] = deque()
        while self._unassigned:
            item = self._unassigned.popleft()
            topic, value, key, headers, partition, report, deadline = item
            entries = handle.pool.directory.partitions(topic)
            if entries is not None:
                self._append(handle, topic, value, key, headers, partition, 0, report, len(entries))
            elif now >= deadline:
                timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
                with self._reports_ready:
                    self._reports.append((None, (topic, report), timed_out))
            else:
                waiting.append(item)
        self._unassigned = waiting

    # ------------------------------------------------------------------ reports

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery reports (waiting up to ``timeout`` s for one; None or a negative
        value: until one comes); returns how many were served."""
        self._check_open()
        self._maybe_stats()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            with _confluent_errors:
                self._serve_unassigned()
            with self._reports_ready:
                if not self._reports:
                    remaining = 0.05 if deadline is None else deadline - time.monotonic()
                    if remaining > 0:
                        self._reports_ready.wait(min(remaining, 0.05))
                if self._reports or (deadline is not None and time.monotonic() >= deadline):
                    break
        return self._serve_reports()

    def _serve_reports(self) -> int:
        served = 0
        while self._reports:
            try:
                future, (topic, report), error = self._reports.popleft()
            except IndexError:
                break
            callback, key, value, headers, sent_at = report
            if future is not None and future.failed():
                assert future.exception is not None
                error = KafkaError.from_exception(future.exception)
            served += 1
            if callback is not None:
                latency = time.monotonic() - sent_at
                callback(error, Message(future, topic, key, value, headers, error, latency))
        return served

    def flush(self, timeout: float | None = None) -> int:
        """Send everything now and serve reports until none is pending or ``timeout`` s
        passed; returns how many are still pending."""
        self._check_open()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while len(self):
            with _confluent_errors:
                self._handle.wake_sender()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            self.poll(0.05 if remaining is None else min(0.05, remaining))
        return len(self)

    def __len__(self) -> int:
        if self._closed:
            return 0
        handle = self._engine._handle
        pending = 0 if handle.pool.forked else handle._outstanding
        return pending + len(self._reports) + len(self._unassigned)

    def __bool__(self) -> bool:
        return True

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Report this process's pending records as purged (``_PURGE_QUEUE``); records
        already in the shared pool may still be delivered by the Sender, unreported."""
        del blocking
        self._check_open()
        if not (in_queue or in_flight):
            return
        code = KafkaError._PURGE_QUEUE if in_queue else KafkaError._PURGE_INFLIGHT
        purged = KafkaError(code)
        with self._reports_ready:
            while self._unassigned:
                topic, _, _, _, _, report, _ = self._unassigned.popleft()
                self._reports.append((None, (topic, report), purged))
        self._handle.fail_pending(_Purged(code))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Topics and partitions as the pool's Sender last saw them (``topic``: wait up to
        ``timeout`` s for it)."""
        self._check_open()
        with _confluent_errors:
            handle = self._handle
            if topic is not None and handle.pool.directory.partitions(topic) is None:
                handle.request_topic(topic)
                deadline = time.monotonic() + (300 if timeout is None or timeout < 0 else timeout)
                while handle.pool.directory.partitions(topic) is None:
                    if time.monotonic() >= deadline:
                        raise KafkaException(KafkaError._TIMED_OUT, f"no metadata for {topic!r}")
                    time.sleep(0.01)
        snapshot = handle.pool.directory.snapshot()
        names = [topic] if topic is not None else list(snapshot.topics)
        return ClusterMetadata({
            name: TopicMetadata(name, {
                p: PartitionMetadata(p, e.leader) for p, e in enumerate(snapshot.topics[name])
            })
            for name in names
        })  # fmt: skip

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` s), then detach; later calls raise RuntimeError."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            handle = self._engine._handle
            if not handle.pool.forked:
                handle.fail_pending(KafkaTimeoutError("the producer was closed"))
                handle.close(0)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Producer has been closed")

    def _maybe_stats(self) -> None:
        interval = self._settings["statistics_interval_ms"]
        callback = self._settings["stats_cb"]
        if not interval or callback is None:
            return
        now = time.monotonic()
        if now - getattr(self, "_stats_at", 0.0) >= interval / 1000:
            self._stats_at = now
            from shmkafka.shm.stat import pool_stat

            callback(json.dumps(pool_stat(self._engine.pool_name)))


class _Purged(ProtocolKafkaError):
    def __init__(self, code: int) -> None:
        super().__init__(_LOCAL[code][1])
        self.error_code = code


class PartitionMetadata:
    def __init__(self, partition: int, leader: int) -> None:
        self.id = partition
        self.leader = leader
        self.replicas = [leader] if leader >= 0 else []
        self.isrs = list(self.replicas)
        self.error = None


class TopicMetadata:
    def __init__(self, topic: str, partitions: dict[int, PartitionMetadata]) -> None:
        self.topic = topic
        self.partitions = partitions
        self.error = None


class ClusterMetadata:
    def __init__(self, topics: dict[str, TopicMetadata]) -> None:
        self.topics = topics
        self.cluster_id = None
        self.controller_id = -1
        self.brokers: dict[int, Any] = {}


__all__ = ["KafkaError", "KafkaException", "Message", "Producer"]
