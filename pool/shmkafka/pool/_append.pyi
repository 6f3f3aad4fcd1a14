from collections.abc import Callable
from typing import TypeVar

_C = TypeVar("_C", bound=tuple[object, ...])

class FastAppend:
    def __init__(
        self,
        buffer: memoryview,
        semaphores: list[str],
        layout: dict[str, int],
        pool_lock: str,
        lockdep: object | None = None,
    ) -> None: ...
    def note_new_batch(self, now_ms: int) -> bool: ...
    def append(
        self, deque_id: int, timestamp_ms: int, tail: bytes, now_ms: int, version: int
    ) -> tuple[int, int, int, int, int] | None: ...
    def append_kv(
        self,
        deque_id: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        now_ms: int,
        version: int,
    ) -> tuple[int, int, int, int, int] | None: ...
    def send_kv(
        self,
        route: tuple[int, tuple[int, ...]],
        partition: int,
        key: bytes | None,
        value: bytes | None,
    ) -> tuple[int, int, int, int, int, int, int] | int | None: ...
    def drain_first(self, deque_id: int, room: int) -> tuple[int, int, int, int] | int: ...
    def queued_heads(
        self, deques_used: int
    ) -> tuple[list[tuple[int, int, int, int, int, int, int, int, int]], list[int]]: ...
    def post_result(self, appenders: bytes, entry: bytes) -> tuple[list[int], list[int]]: ...
    def take_results(
        self, slot: int, completion_type: type[_C], view_type: type[tuple[int, int, int, int]]
    ) -> list[_C] | None: ...
    def seal_request(
        self,
        flexible: bool,
        head: bytes,
        topics: list[
            tuple[
                bytes,
                list[
                    tuple[int, int, int, int, int, int]
                    | tuple[int, int, int, int, int, int, tuple[bytes | memoryview, ...]]
                ],
            ]
        ],
        codec: int,
        level: int,
        crc32c: Callable[[memoryview], int],
    ) -> tuple[list[bytes | bytearray | memoryview], list[int]]: ...
    def finish_sent(
        self,
        rows: list[tuple[int, int, int, int, int]],
        node: int,
        sent_ms: int,
        took_ms: int,
        deques_used: int,
    ) -> tuple[list[int], list[tuple[int, list[int]]], list[int], list[tuple[int, int]]]: ...
    def lz4_frame(self, data: bytes | memoryview, level: int) -> bytes: ...
    def offsets(self) -> dict[str, int]: ...
    def close(self) -> None: ...

def full_fence() -> None: ...
def load_lz4(path: str) -> bool: ...
