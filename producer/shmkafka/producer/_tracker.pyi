from typing import Any

from shmkafka.pool._append import FastAppend

class BatchWait:
    cond: Any
    completions: list[tuple[Any, Any]]
    listed: list[Any]
    pending: int
    retire_at: float
    def outcome(self, offset_delta: int) -> tuple[Any, Any] | None: ...
    def listen(self, future: Any) -> bool: ...

class Future:
    _callbacks: Any
    _wait: Any
    flags: int
    header_size: int
    key_size: int
    offset_delta: int
    partition: int
    registration: int
    report: Any
    timestamp: int
    topic: str
    value_size: int
    def _outcome(self) -> tuple[Any, Any] | None: ...

class Tracker:
    outstanding: int
    waits: dict[int, BatchWait]
    cond: Any
    on_came_first: Any
    def __init__(self, cond: Any, future_type: type[Any], on_batch: Any) -> None: ...
    def send(
        self,
        fast: FastAppend,
        route: tuple[int, tuple[int, ...]],
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        report: Any,
        want_future: bool,
    ) -> Any: ...
    def track(self, topic: str, facts: tuple[int, ...], report: Any, want_future: bool) -> Any: ...
    def complete(
        self,
        registration: int,
        first: int,
        last: int,
        completion: Any,
        error: Any,
        local: bool,
        retire_at: float,
    ) -> list[Any] | None: ...
    def pending(self) -> list[tuple[int, int]]: ...
    def retire(self, now: float) -> None: ...
    def clear(self) -> None: ...

def adopt_methods(type: type[Any], namespace: dict[str, Any]) -> None: ...
def live_futures() -> int: ...

PARTITION_MURMUR2: int
PARTITION_CRC32: int

class SendEntry:
    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Any: ...
    def _fast_enable(self, *args: Any) -> None: ...
    def _fast_guard(self, buffer: Any, offset: int, expected: int) -> None: ...
    def _fast_disable(self) -> None: ...
    def _fast_enabled(self) -> bool: ...

class ProduceEntry:
    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Any = None,
        callback: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None: ...
    def _fast_enable(self, *args: Any) -> None: ...
    def _fast_guard(self, buffer: Any, offset: int, expected: int) -> None: ...
    def _fast_disable(self) -> None: ...
    def _fast_enabled(self) -> bool: ...

class AppendEntry:
    def _fast_append(self, topic: str, value: Any, key: Any, report: Any) -> bool: ...
    def _fast_enable(self, *args: Any) -> None: ...
    def _fast_guard(self, buffer: Any, offset: int, expected: int) -> None: ...
    def _fast_disable(self) -> None: ...
    def _fast_enabled(self) -> bool: ...
