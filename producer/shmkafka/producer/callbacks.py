"""Calling an app's callbacks from the producer's machinery: from the completion thread
without keeping the producer alive, several in a row where one may raise, and an OAUTHBEARER
token callback as the pool's token board wants it (shm/tokens.py)."""

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


def oauth_token_provider(
    callback: Callable[..., Any], config: str | None
) -> Callable[[], tuple[str, int]]:
    """confluent-kafka's ``oauth_cb(sasl.oauthbearer.config)``: (token, expiry in epoch
    seconds[, principal, extensions]) as the token board's (token, expiry ms)."""

    def provide() -> tuple[str, int]:
        answer = callback(config)
        return str(answer[0]), int(float(answer[1]) * 1000)

    return provide
