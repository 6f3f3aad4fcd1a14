from typing import Any

def serve_reports(
    reports: Any, message_type: Any, serve_other: Any
) -> tuple[int, BaseException | None]: ...
def use_message_layout(
    message_type: Any, offsets: tuple[int, ...], none_is_null: bool, defaults: bytes, /
) -> None: ...
def layout_message(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    tstype: int,
    timestamp: int,
    latency: float,
    /,
) -> Any: ...
