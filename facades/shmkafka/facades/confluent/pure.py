"""confluent-kafka's value types in pure Python, for hosts without confluent-kafka:
``KafkaError``, ``KafkaException``, ``Message``, ``TopicPartition``. With confluent-kafka
installed, ``types`` uses its own classes instead, so these only have to behave
as those do (tests/facades/test_peer_modules_types.py compares the two, side by side).
"""

from __future__ import annotations

import builtins
import operator
from typing import Any

from shmkafka.facades.confluent.librdkafka_errors import BY_CODE, ERRORS

TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME = 0, 1, 2
OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_INVALID = -2, -1, -1000, -1001


class KafkaError:
    """An error code with librdkafka's name and text; compares equal to its code."""

    __slots__ = ("_code", "_fatal", "_retriable", "_str", "_txn_requires_abort")

    def __init__(
        self,
        error: int,
        reason: str | None = None,
        fatal: bool = False,
        retriable: bool = False,
        txn_requires_abort: bool = False,
    ) -> None:
        self._code = operator.index(error)
        self._str = reason if reason is not None else _text(self._code)
        self._fatal, self._retriable = bool(fatal), bool(retriable)
        self._txn_requires_abort = bool(txn_requires_abort)

    def code(self) -> int:
        return self._code

    def name(self) -> builtins.str:
        return _name(self._code)

    def str(self) -> builtins.str:
        return self._str

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._txn_requires_abort

    def _compared(self, other: object) -> int | None:
        if isinstance(other, KafkaError):
            return other._code
        if isinstance(other, int):
            return other
        raise TypeError(f"'{type(other).__name__}' object cannot be interpreted as an integer")

    def __eq__(self, other: object) -> bool:
        return self._code == self._compared(other)

    def __ne__(self, other: object) -> bool:
        return self._code != self._compared(other)

    def __lt__(self, other: object) -> bool:
        code = self._compared(other)
        return code is not None and self._code < code

    def __hash__(self) -> int:
        return hash(self._code)

    def __str__(self) -> builtins.str:
        return self.__repr__()

    def __repr__(self) -> builtins.str:
        return f'KafkaError{{code={self.name()},val={self._code},str="{self._str}"}}'


for _code, _name_of, _ in ERRORS:
    setattr(KafkaError, _name_of, _code)


def _name(code: int) -> str:
    entry = BY_CODE.get(code)
    return entry[0] if entry else f"ERR_{code}?"


def _text(code: int) -> str:
    entry = BY_CODE.get(code)
    return entry[1] if entry else f"Err-{code}?"


class KafkaException(Exception):
    """confluent-kafka's exception: ``args[0]`` is a KafkaError (or what was given)."""


class Message:
    """A produced (or consumed) record; every accessor is a method, as in confluent-kafka."""

    __slots__ = (
        "_error", "_headers", "_key", "_latency", "_leader_epoch", "_offset", "_partition",
        "_timestamp", "_topic", "_value",
    )  # fmt: skip

    def __init__(
        self,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
        key: Any = None,
        value: Any = None,
        headers: Any = None,
        error: KafkaError | None = None,
        timestamp: tuple[int, int] = (TIMESTAMP_NOT_AVAILABLE, 0),
        latency: float | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers, self._error = key, value, headers, error
        self._timestamp, self._latency, self._leader_epoch = timestamp, latency, leader_epoch

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def error(self) -> KafkaError | None:
        return self._error

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def latency(self) -> float | None:
        return self._latency

    def leader_epoch(self) -> int | None:
        return self._leader_epoch

    def set_topic(self, topic: str) -> None:
        self._topic = topic

    def set_key(self, key: Any) -> None:
        self._key = key

    def set_value(self, value: Any) -> None:
        self._value = value

    def set_headers(self, headers: Any) -> None:
        self._headers = headers

    def set_error(self, error: KafkaError | None) -> None:
        self._error = error

    def __len__(self) -> int:
        return len(self._value) if self._value is not None else 0


class TopicPartition:
    """A topic, a partition and an offset (and what librdkafka adds to them)."""

    __slots__ = ("error", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.metadata, self.leader_epoch = metadata, leader_epoch
        self.error: KafkaError | None = None

    def _key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicPartition) and self._key() == other._key()

    def __lt__(self, other: TopicPartition) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"TopicPartition{{topic={self.topic},partition={self.partition},"
            f"offset={self.offset},leader_epoch={self.leader_epoch},error={self.error}}}"
        )

    __str__ = __repr__
