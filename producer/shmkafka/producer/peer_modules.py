"""Names of a peer library that shmkafka does not implement, passed through from it."""

from __future__ import annotations

import importlib
from typing import Any


def from_peer(peer: str, mirror: str, what: str, name: str) -> Any:
    """``name`` of the installed ``peer`` module, for the mirror module's ``__getattr__``."""
    try:
        module = importlib.import_module(peer)
    except ImportError:
        raise AttributeError(
            f"{mirror} has no {name!r}: shmkafka provides the {what}; install {peer} for its "
            "other classes"
        ) from None
    return getattr(module, name)
