"""kafka-python's exception classes under ours: with kafka-python installed, every error the
``KafkaProducer`` API raises is also an instance of kafka-python's class of the same name,
so code that says ``except kafka.errors.KafkaTimeoutError`` keeps catching it after the
import is switched to shmkafka.

Rules:
- ``install()`` sets ``KafkaError.twin_class`` (protocol/errors.py): from then on every
  instance of one of our classes is made of its *twin*, a class made once per class that
  derives from ours first and from kafka-python's match second. ``isinstance`` against
  either tree holds, our methods come first, ``str()`` is the same as before.
- kafka-python is imported on the first error made, not before, and only if it is
  installed: its import costs about 150 ms, and most processes never fail a record.
- The match is found along our class's MRO: a broker error by its code, anything else by
  its name (``PEER_NAMES`` lists the few names that differ); the root matches the root.
- Only the app processes install it; the Sender never imports a peer library.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

from shmkafka.facades.kafka_python.errors import kafka_errors
from shmkafka.protocol.errors import BrokerResponseError, KafkaError

# our class name -> kafka-python's, where they differ
PEER_NAMES = {"ProtocolError": "KafkaProtocolError"}
_CODES = {cls: code for code, cls in kafka_errors.items()}

_twins: dict[type[KafkaError], type[KafkaError]] = {}
_peer: ModuleType | bool | None = None  # kafka.errors; False: not installed


def install() -> None:
    KafkaError.twin_class = twin_class


def peer_errors() -> ModuleType | None:
    """kafka-python's ``kafka.errors``, imported on first use; None without kafka-python."""
    global _peer
    if _peer is None:
        try:
            found = importlib.util.find_spec("kafka") is not None
        except (ImportError, ValueError):
            found = False
        if found:
            import kafka.errors as peer

            _peer = peer
        else:
            _peer = False
    return _peer if isinstance(_peer, ModuleType) else None


def twin_class(cls: type[KafkaError]) -> type[KafkaError]:
    """The class an instance of ``cls`` is made of (``cls`` itself without a peer)."""
    twin = _twins.get(cls)
    if twin is None:  # (two threads may make one each: setdefault keeps the first for all)
        twin = _twins.setdefault(cls, _make_twin(cls))
    return twin


def _make_twin(cls: type[KafkaError]) -> type[KafkaError]:
    peer = peer_errors()
    if peer is None or "twin_of" in cls.__dict__:
        return cls
    match = _peer_match(cls, peer)
    if issubclass(cls, match):
        return cls
    namespace: dict[str, Any] = {
        "twin_of": cls,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        # kafka-python's KafkaError defines __eq__ and so drops __hash__: keep ours hashable
        "__hash__": Exception.__hash__,
    }
    return type(cls.__name__, (cls, match), namespace)


def _peer_match(cls: type[KafkaError], peer: ModuleType) -> type[BaseException]:
    root: type[BaseException] = peer.KafkaError
    for ancestor in cls.__mro__:
        if not (isinstance(ancestor, type) and issubclass(ancestor, KafkaError)):
            continue
        match: Any = None
        if issubclass(ancestor, BrokerResponseError) and ancestor in _CODES:
            match = peer.kafka_errors.get(_CODES[ancestor])
        if match is None:
            match = getattr(peer, PEER_NAMES.get(ancestor.__name__, ancestor.__name__), None)
        if isinstance(match, type) and issubclass(match, root):
            return match
    return root
