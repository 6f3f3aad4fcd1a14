"""Names of a peer library that shmkafka does not implement, passed through from it.

Rules:
- Consumers, admin clients, serializers and value types pass through: an app that also
  consumes keeps one import line.
- A producer never does. A peer's producer class (any class named ``*Producer``), or a
  module that holds one (``confluent_kafka.aio``, ``confluent_kafka.avro``,
  ``aiokafka.producer``...), would run the peer's own client beside the pool without a word:
  it is refused with an AttributeError that says what to use.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

# what to use instead, per peer name refused
INSTEAD = {
    "AvroProducer": "an AvroSerializer, then shmkafka.confluent_kafka.Producer's produce()",
}


def is_producer(obj: Any) -> bool:
    """A peer's producer class, or a module that holds one."""
    if inspect.isclass(obj):
        return obj.__name__.endswith("Producer")
    if isinstance(obj, ModuleType):
        return any(
            inspect.isclass(value) and value.__name__.endswith("Producer")
            for name, value in vars(obj).items()
            if not name.startswith("_")
        )
    return False


def from_peer(peer: str, mirror: str, what: str, name: str) -> Any:
    """``name`` of the installed ``peer`` module, for the mirror module's ``__getattr__``."""
    try:
        module = importlib.import_module(peer)
    except ImportError:
        raise AttributeError(
            f"{mirror} has no {name!r}: shmkafka provides the {what}; install {peer} for its "
            "other classes"
        ) from None
    found = getattr(module, name)
    if not name.startswith("__") and is_producer(found):
        instead = INSTEAD.get(name, f"{mirror}'s own producer")
        raise AttributeError(
            f"{mirror}.{name} would produce through {peer} itself, outside shmkafka's pool: "
            f"use {instead} (or import {peer}.{name} directly to run {peer}'s own client)"
        )
    return found
