"""Calling an app's callbacks from the producer's machinery: from the completion thread
without keeping the producer alive, and several in a row where one may raise."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any


def call_capturing(callback: Callable[..., Any], args: tuple[Any, ...]) -> BaseException | None:
    """Call ``callback``; return what it raised (to raise after the others ran)."""
    try:
        callback(*args)
    except Exception as exc:  # noqa: BLE001  (raised again after the other callbacks)
        return exc
    return None


def weakly(method: Callable[[Any], None]) -> Callable[[Any], None]:
    """``method`` of an object, called only while the object lives (the completion thread
    must not keep a producer alive)."""
    ref = weakref.WeakMethod(method)

    def call(arg: Any) -> None:
        bound = ref()
        if bound is not None:
            bound(arg)

    return call
