from typing import Any

def serve_reports(
    reports: Any, message_type: Any, serve_other: Any
) -> tuple[int, BaseException | None]: ...
