"""aiokafka's value types and errors for the asyncio producer (producer.py): aiokafka's own
classes when it is installed (so ``except aiokafka.errors.KafkaError`` catches ours), else
equivalents of the same names and shapes (``shmkafka.aiokafka.errors`` and ``.structs``).
"""

from __future__ import annotations

import functools
import importlib
import time
from types import ModuleType, SimpleNamespace
from typing import Any, NamedTuple

from shmkafka.pool import errors as shmkafka_errors
from shmkafka.producer.futures import Delivery, Future, TopicPartition
from shmkafka.protocol.records import HEADER_SIZE, record_size_bound


class RecordMetadata(NamedTuple):
    """aiokafka.structs.RecordMetadata, field for field."""

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int | None
    timestamp_type: int
    log_start_offset: int | None


class KafkaError(RuntimeError):
    """aiokafka.errors.KafkaError: its ``errno``, ``message``, ``retriable``."""

    errno = -1
    message = "Unknown"
    retriable = False
    invalid_metadata = False

    def __str__(self) -> str:
        if not self.args:
            return self.__class__.__name__
        return f"{self.__class__.__name__}: {super().__str__()}"


class IllegalOperation(Exception):  # (not a KafkaError, as in aiokafka)
    """Raised if you try to execute an operation, that is not available with current
    configuration."""


def _error(name: str, base: type[KafkaError] = KafkaError, **attrs: Any) -> type[KafkaError]:
    return type(name, (base,), {"__module__": "shmkafka.aiokafka.errors", **attrs})


_FALLBACK: dict[str, type[BaseException]] = {
    "KafkaError": KafkaError,
    "IllegalOperation": IllegalOperation,
}
_ATTRS: dict[str, dict[str, Any]] = {
    "KafkaTimeoutError": {"retriable": True},
    "KafkaConfigurationError": {},
    "KafkaConnectionError": {"retriable": True, "invalid_metadata": True},
    "ProducerClosed": {},
    "IllegalStateError": {},
    "UnsupportedVersionError": {},
    "MessageSizeTooLargeError": {"errno": 10, "message": "MESSAGE_SIZE_TOO_LARGE"},
    "UnknownTopicOrPartitionError": {"errno": 3, "retriable": True, "invalid_metadata": True},
    "NotLeaderForPartitionError": {"errno": 6, "retriable": True, "invalid_metadata": True},
    "RequestTimedOutError": {"errno": 7, "retriable": True},
    "TopicAuthorizationFailedError": {"errno": 29},
    "InvalidTopicError": {"errno": 17},
    "RecordListTooLargeError": {"errno": 18},
    "NotEnoughReplicasError": {"errno": 19, "retriable": True},
    "ProducerFenced": {"errno": 90},
}
for _name, _attrs in _ATTRS.items():
    _FALLBACK[_name] = _error(_name, **_attrs)


@functools.cache
def _peer() -> ModuleType | None:
    try:
        return importlib.import_module("aiokafka")
    except ImportError:
        return None


def peer_version() -> str:
    peer = _peer()
    return str(peer.__version__) if peer is not None else "0.14.0"


@functools.cache
def errors() -> Any:
    """aiokafka.errors when installed, else the equivalents (one namespace either way)."""
    if _peer() is not None:
        return importlib.import_module("aiokafka.errors")
    return SimpleNamespace(**_FALLBACK, for_code=_for_code)


def _for_code(code: int) -> type[BaseException]:
    for cls in _FALLBACK.values():
        if getattr(cls, "errno", None) == code:
            return cls
    return KafkaError


def aiokafka_error(exc: BaseException) -> BaseException:
    """The aiokafka error for one of shmkafka's (same name if aiokafka has it; by the
    broker's error code otherwise)."""
    namespace = errors()
    name = type(exc).__name__
    text = str(exc)
    cls: Any = getattr(namespace, name, None)
    if name == "KafkaTimeoutError" or isinstance(exc, shmkafka_errors.KafkaTimeoutError):
        cls = namespace.KafkaTimeoutError
    elif not (isinstance(cls, type) and issubclass(cls, BaseException)):
        code = getattr(exc, "errno", None)
        cls = namespace.for_code(code) if isinstance(code, int) and code > 0 else None
    made: BaseException = (cls or namespace.KafkaError)(text)
    return made


class MetadataMaker:
    """Done records' aiokafka RecordMetadata, for one hand-over (TopicPartitions shared)."""

    def __init__(self) -> None:
        self._type, self._tp_type = _record_metadata_type()
        self._partitions: dict[tuple[str, int], Any] = {}

    def __call__(self, record: Future, result: Delivery) -> Any:
        """``record``'s metadata, from its ``result`` (a success: ``Future.delivery``)."""
        topic, partition = record.topic, record.partition
        key = (topic, partition)
        tp = self._partitions.get(key)
        if tp is None:
            tp = self._partitions[key] = self._tp_type(topic, partition)
        offset, stamp, stamp_type, start, _ = result
        # (tuple.__new__: the NamedTuple's own __new__ is a Python call per record)
        fields = (topic, partition, tp, offset, stamp, stamp_type, start if start >= 0 else None)
        return tuple.__new__(self._type, fields)


@functools.cache
def _record_metadata_type() -> tuple[Any, Any]:
    """aiokafka's RecordMetadata and TopicPartition when it is installed, else ours."""
    if _peer() is not None:
        structs = importlib.import_module("aiokafka.structs")
        return structs.RecordMetadata, structs.TopicPartition
    return RecordMetadata, TopicPartition


class BatchBuilder:
    """aiokafka's BatchBuilder (``create_batch``): records added until ``batch_size``
    bytes, then ``append`` answers None; ``send_batch`` sends them in order."""

    def __init__(self, batch_size: int, key_serializer: Any, value_serializer: Any) -> None:
        self._limit = batch_size
        self._size = HEADER_SIZE
        self._key_serializer, self._value_serializer = key_serializer, value_serializer
        self.records: list[tuple[Any, Any, int | None, list[tuple[str, bytes]]]] = []
        self._closed = False

    def append(self, *, timestamp: int | None, key: Any, value: Any,
               headers: Any = ()) -> Any:  # fmt: skip
        if self._closed:
            return None
        key = key if self._key_serializer is None else self._key_serializer(key)
        value = value if self._value_serializer is None else self._value_serializer(value)
        header_list = list(headers or [])
        size = record_size_bound(key, value, header_list) - HEADER_SIZE
        if self.records and self._size + size > self._limit:
            self.close()
            return None
        stamp = int(time.time() * 1000) if timestamp is None else int(timestamp)  # (ms)
        self.records.append((key, value, stamp, header_list))
        self._size += size
        return SimpleNamespace(offset=len(self.records) - 1, size=size, timestamp=stamp, crc=None)

    def close(self) -> None:
        self._closed = True

    def size(self) -> int:
        return self._size

    def record_count(self) -> int:
        return len(self.records)
