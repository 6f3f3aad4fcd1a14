"""aiokafka.errors: aiokafka's own module's classes when it is installed (so an ``except``
written for aiokafka catches shmkafka's errors), equivalents of the same names otherwise."""

from __future__ import annotations

from typing import Any

from shmkafka.facades.aiokafka.types import errors as _errors


def __getattr__(name: str) -> Any:
    try:
        return getattr(_errors(), name)
    except AttributeError:
        raise AttributeError(
            f"module 'shmkafka.aiokafka.errors' has no attribute {name!r}"
        ) from None
