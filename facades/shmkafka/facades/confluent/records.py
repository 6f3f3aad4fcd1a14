"""What the confluent-kafka ``Producer`` keeps of a record until its delivery report is
served, and its conversions: argument checks with confluent-kafka's messages, librdkafka's
partitioners, shmkafka errors as ``KafkaError`` / ``KafkaException``, and the report's
``Message``.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from shmkafka.facades.confluent.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
)
from shmkafka.pool.errors import (
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MemoryExhaustedError,
    PoolCapacityError,
    TransactionAbortedError,
)
from shmkafka.producer import entry
from shmkafka.producer.futures import Future
from shmkafka.protocol.broker_errors import MessageSizeTooLargeError
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import KafkaError as ProtocolKafkaError
from shmkafka.protocol.hashing import consistent_partition, murmur2_partition

SASL_AUTHENTICATION_FAILED = ErrorCode.SASL_AUTHENTICATION_FAILED

# (callback, key bytes, value bytes, monotonic time of produce())
ReportData = tuple[Any, bytes | None, bytes | None, float]


class Unassigned(NamedTuple):
    """A record waiting in this process for its topic's metadata (librdkafka's UA queue)."""

    topic: str
    value: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int
    timestamp: int
    report: ReportData
    deadline: float  # monotonic s: fails with _MSG_TIMED_OUT after


class Report(NamedTuple):
    """A delivery report to serve: the record's future (None: it never reached the pool)
    or the error it failed with locally."""

    future: Future | None
    report: ReportData
    error: Any  # KafkaError | None
    topic: str = ""

    @property
    def callback(self) -> Any:
        return self.report[0]


def check_value(data: Any) -> None:
    if data is None or isinstance(data, str | bytes):
        return
    if isinstance(data, memoryview) and data.readonly:
        return
    if isinstance(data, bytearray | memoryview):
        raise TypeError(f"argument must be read-only bytes-like object, not {type(data).__name__}")
    raise TypeError(f"a bytes-like object is required, not '{type(data).__name__}'")


def check_headers(headers: Any) -> list[tuple[str, bytes | None]]:
    if headers is None:
        return []
    if isinstance(headers, dict):
        items = list(headers.items())
    elif isinstance(headers, list):
        items = headers
    else:
        raise TypeError(
            f"expected headers to be dict or list of (key, value) tuples, not "
            f"{type(headers).__name__}"
        )
    out = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError("Headers are expected to be a list of (key, value) tuples")
        name, value = item
        if isinstance(value, str):
            value = value.encode()
        elif value is not None and not isinstance(value, bytes):
            raise TypeError(
                "expected header value to be None, binary, or unicode string, not "
                f"{type(value).__name__}"
            )
        out.append((str(name), value))
    return out


def check_batch(messages: list[Any]) -> None:
    """``produce_batch``'s checks of every message, before any is queued."""
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TypeError(f"Message at index {index} must be a dict")
        for field in ("value", "key"):
            data = message.get(field)
            if data is not None and not isinstance(data, str | bytes):
                raise TypeError(f"Message {field} at index {index} must be bytes or str")
        if "partition" in message and not isinstance(message["partition"], int):
            raise TypeError(f"Message partition at index {index} must be int")
        if message.get("timestamp") is not None:
            raise NotImplementedError(
                "Message timestamps are not currently supported in batch mode"
            )
        try:
            check_headers(message.get("headers"))
        except TypeError:
            raise ValueError(f"Invalid headers at index {index}") from None


def _fnv1a(key: bytes) -> int:
    h = 0x811C9DC5
    for byte in key:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


# librdkafka's partitioners the C entry computes for keyed records (producer/entry.py)
PARTITIONER_CODES = {"murmur2_random": entry.PARTITION_MURMUR2,
                     "consistent_random": entry.PARTITION_CRC32,
                     "random": entry.PARTITION_RANDOM}  # fmt: skip


def partition_for(name: str, key: bytes | None, count: int) -> int | None:
    """librdkafka's partitioners; None = the pool's sticky choice for a null key."""
    randomly = name == "random" or key is None or (key == b"" and name == "consistent_random")
    if randomly and (name == "random" or name.endswith("_random")):
        return None if key is None else random.randrange(count)
    key = key or b""  # librdkafka maps null keys of the plain hashes to one partition
    if name.startswith("consistent"):
        return consistent_partition(key, count)
    if name.startswith("murmur2"):
        return murmur2_partition(key, count)
    h = _fnv1a(key)  # librdkafka: the absolute value of the hash as a signed int32
    return abs(h - 0x100000000 if h & 0x80000000 else h) % count


def text_of(error: BaseException) -> str:
    """An exception's own message, without the class name kafka-python's str() adds."""
    return str(error.args[0]) if error.args else type(error).__name__


def kafka_error_of(error: BaseException) -> Any:
    """The KafkaError a failed record's report carries."""
    code = getattr(error, "error_code", None)
    if isinstance(error, KafkaTimeoutError) and code is None:
        return KafkaError(KafkaError._MSG_TIMED_OUT)
    if isinstance(error, TransactionAbortedError):  # librdkafka purges them at abort
        return KafkaError(KafkaError._PURGE_QUEUE)
    if isinstance(error, PoolCapacityError):  # a limit of the pool (the text names it)
        return KafkaError(KafkaError._QUEUE_FULL, text_of(error))
    if isinstance(error, KafkaConnectionError):  # the TLS handshake failed
        return KafkaError(KafkaError._SSL, text_of(error))
    if code == SASL_AUTHENTICATION_FAILED:  # as librdkafka reports a refused login
        return KafkaError(KafkaError._AUTHENTICATION, text_of(error))
    if code is None:
        return KafkaError(KafkaError._FAIL, text_of(error))
    if code < 0:  # a librdkafka code (purge): its own text
        return KafkaError(code)
    return KafkaError(code, retriable=bool(getattr(error, "retriable", False)))


def error_of(exc: BaseException) -> Any:
    """The KafkaError of an exception ``produce`` raised (for ``produce_batch``)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    if isinstance(exc, BufferError):
        return KafkaError(KafkaError._QUEUE_FULL)
    return KafkaError(KafkaError._FAIL, str(exc))


def confluent_exception(exc: ProtocolKafkaError) -> Exception:
    """A shmkafka error as confluent-kafka raises it: ``BufferError`` when the pool has no
    memory now, ``KafkaException`` for everything else."""
    if isinstance(exc, MemoryExhaustedError):
        return BufferError(KafkaError(KafkaError._QUEUE_FULL).str())
    if isinstance(exc, MessageSizeTooLargeError):
        return KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, text_of(exc)))
    if isinstance(exc, KafkaConfigurationError):
        return KafkaException(KafkaError(KafkaError._INVALID_ARG, text_of(exc)))
    if isinstance(exc, KafkaTimeoutError):
        return KafkaException(KafkaError(KafkaError._TIMED_OUT, text_of(exc)))
    return KafkaException(kafka_error_of(exc))


def delivered_message(future: Future, key: Any, value: Any, sent_at: float) -> Any:
    """The ``Message`` of a record delivered without error, read from its outcome directly
    (``message_for``'s result for it, without the RecordMetadata on the way); None when the
    record failed (``message_for`` says how)."""
    result = future.delivery()
    if result is None or result.error is not None:
        return None
    return Message(topic=future.topic, partition=future.partition, offset=result.offset,
                   key=key, value=value, error=None,
                   timestamp=(TIMESTAMP_CREATE_TIME, result.timestamp),
                   latency=time.monotonic() - sent_at)  # fmt: skip


def message_for(report: Report) -> Any:
    """The ``Message`` a delivery report callback gets."""
    _, key, value, sent_at = report.report
    topic, error, future = report.topic, report.error, report.future
    partition: int | None = None
    offset: int | None = None
    timestamp = (TIMESTAMP_NOT_AVAILABLE, -1)
    if future is not None:
        topic, partition = future.topic, future.partition
        timestamp = (TIMESTAMP_CREATE_TIME, future.timestamp)
        metadata = future.value
        if metadata is not None:
            offset, timestamp = metadata.offset, (TIMESTAMP_CREATE_TIME, metadata.timestamp)
        elif future.exception is not None:
            error = kafka_error_of(future.exception)
    fields: dict[str, Any] = {
        "topic": topic, "key": key, "value": value, "error": error, "timestamp": timestamp,
        "latency": time.monotonic() - sent_at,
    }  # fmt: skip
    if partition is not None:  # (confluent-kafka's Message takes no None for these)
        fields["partition"] = partition
    if offset is not None:
        fields["offset"] = offset
    return Message(**fields)


class Purged(ProtocolKafkaError):
    """A future failed by ``purge`` (or ``close``): reported with its librdkafka code."""

    def __init__(self, code: int) -> None:
        super().__init__(KafkaError(code).str())
        self.error_code = code


def wait_appended(unassigned: deque[Unassigned], record: Unassigned,
                  serve: Callable[[], None]) -> None:  # fmt: skip
    """A sync pool's ``produce`` returns once its record is on the disk: one that waits for
    its topic is served here until it is appended (and committed: the handle's send waits
    for that) or failed at its deadline, never left for a later ``poll``."""
    pause = 0.001
    while any(r is record for r in unassigned):
        serve()
        if time.monotonic() > record.deadline + 1.0:  # (serve fails it at its deadline)
            return
        time.sleep(pause)
        pause = min(2 * pause, 0.05)


def serve_waiting(
    unassigned: deque[Unassigned], handle: Any,
    append: Callable[[Any, Unassigned], bool], fail: Callable[[Unassigned, Any], None],
) -> None:  # fmt: skip
    """Append the records waiting for their topic whose topic is now known (``append``),
    fail those refused or waiting too long (``fail``); the others wait on, in order. A
    refused login or TLS handshake fails none: as librdkafka's, they wait for a login that
    works (``set_sasl_credentials``) until ``message.timeout.ms``, while ``error_cb`` hears
    of each refusal. The caller holds its producer's lock of the queue."""
    now = time.monotonic()
    refused: dict[str, Any] = {}  # topics a limit of the pool refused: their records fail
    if handle is not None:
        for topic in {r.topic for r in unassigned}:
            if (error := handle.topics.still_waiting(topic)) is not None:
                refused[topic] = kafka_error_of(error)
    # A record that waits stays in the deque, and so does every later record of its topic:
    # the deque is never empty while one waits (the producing thread appends directly when
    # it is), and a topic that becomes known during the pass cannot let a later record of it
    # overtake an earlier one.
    blocked: set[str] = set()
    index = 0
    while index < len(unassigned):
        record = unassigned[index]
        if record.topic in blocked:
            index += 1
            continue
        if not _serve_one(record, handle, refused, now, append, fail):
            blocked.add(record.topic)
            index += 1
            continue
        # (removed only once appended or failed: until the last one is, the C entry sees
        # records waiting and takes the Python path, behind them)
        if index == 0:
            unassigned.popleft()
        else:
            del unassigned[index]


def _serve_one(
    record: Unassigned, handle: Any, refused: dict[str, Any], now: float,
    append: Callable[[Any, Unassigned], bool], fail: Callable[[Unassigned, Any], None],
) -> bool:  # fmt: skip
    """Append or fail one waiting record; False if it waits on."""
    if record.topic in refused:
        fail(record, refused[record.topic])
    else:
        try:
            if handle is None or not append(handle, record):
                if now < record.deadline:
                    return False
                fail(record, KafkaError(KafkaError._MSG_TIMED_OUT))
        except ProtocolKafkaError as exc:  # this record's failure, not the caller's
            fail(record, kafka_error_of(exc))
    return True
