"""The confluent API's delivery reports served in C (``_reports.c``, an extension of its
own): the delivered common record's ``Message`` made and its callback called without a Python
frame; every other report goes to the Python hook it is given (``Producer._serve_report``,
the reference). ``serve_reports`` is None when the extension is not built or
``SHMKAFKA_PURE_PYTHON`` is set.

Rules:
- confluent-kafka's ``Message`` constructor parses its nine arguments by keyword rules, a
  third of what serving one report costs. So the C serve writes the fields of a new
  ``Message`` itself, where ``message_layout`` found them in two probes the constructor
  made. Only a layout of ``KNOWN_LAYOUTS`` is used (a field another version adds could hold
  an object the probes cannot tell from a number), and only once it made the same
  ``Message`` as the constructor, byte for byte, for every value ``checked_layout`` tries.
  Anything else (another layout, the pure-Python ``Message``, no ctypes) leaves the
  constructor in use.
"""

from __future__ import annotations

import gc
import struct
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from shmkafka.facades.confluent.types import PEER_INSTALLED, Message
from shmkafka.producer.views import native_check

# serve_reports(reports, message_type, serve_other) -> (served, last exception raised)
ServeReports = Callable[
    [Any, Any, Callable[[Any], BaseException | None]], tuple[int, BaseException | None]
]
serve_reports: ServeReports | None
use_message_layout: Callable[[Any, tuple[int, ...], bool, bytes], None] | None
layout_message: Callable[..., Any] | None

if TYPE_CHECKING:
    serve_reports = use_message_layout = layout_message = None
else:
    try:
        native_check()
        from shmkafka.facades.confluent._reports import (
            layout_message,
            serve_reports,
            use_message_layout,
        )
    except ImportError:  # not built
        serve_reports = use_message_layout = layout_message = None

# the fields the C serve writes, in use_message_layout's order, and each one's format
FIELDS = ("topic", "partition", "offset", "key", "value", "tstype", "timestamp", "latency")
_POINTER = "=Q" if struct.calcsize("P") == 8 else "=I"
FORMATS = (_POINTER, "=i", "=q", _POINTER, _POINTER, "=i", "=q", "=q")
_HEAD = object.__basicsize__  # (PyObject_HEAD: the type's fields start after it)
_HEAPTYPE = 1 << 9  # (Py_TPFLAGS_HEAPTYPE: a type made by Python code)


def _probe(message_type: type, n: int, key: bytes | None) -> tuple[Any, tuple[Any, ...]]:
    """A Message made by the constructor with values told apart by ``n``, and what each
    field holds in its memory (an object's field: its address)."""
    topic = f"probe-{n}-{id(message_type)}"
    value = None if key is None else b"value-%d" % n
    latency_us = 1_234_500_000 * (n + 1)  # (seconds exact in binary: no rounding)
    message = message_type(
        topic, 0x1A2B3C4D + n, 0x1122334455667788 + n, key, value, None, None,
        (n + 1, 0x0102030405060708 + n), latency_us / 1_000_000,
    )  # fmt: skip
    return message, (id(topic), 0x1A2B3C4D + n, 0x1122334455667788 + n, id(key), id(value),
                     n + 1, 0x0102030405060708 + n, latency_us)  # fmt: skip


def _memory(obj: Any) -> bytes:
    import ctypes  # (here: a Python built without it only goes without the layout)

    return ctypes.string_at(id(obj), type(obj).__basicsize__)


class Layout(NamedTuple):
    """Where a Message type keeps each of ``FIELDS`` (offsets into the object), whether it
    keeps a None key or value as NULL, and the bytes its constructor sets whatever the
    arguments (those of the fields zero), written over what its tp_new made."""

    offsets: tuple[int, ...]
    none_is_null: bool
    defaults: bytes


# The layouts of confluent-kafka's C Message this code may write (64-bit CPython): its
# fields' offsets, and the bytes its constructor sets whatever the arguments (leader_epoch
# and the delivery count, -1). As confluent-kafka 2.16 lays it out: topic, value, key,
# headers, its C headers, error, partition, offset, leader_epoch, timestamp, its type,
# latency, the delivery count.
KNOWN_LAYOUTS = {
    ((16, 64, 72, 32, 24, 96, 88, 104), True, ((80, b"\xff" * 4), (112, b"\xff" * 2))),
}


def _known(layout: Layout) -> bool:
    """Whether ``layout`` is one of ``KNOWN_LAYOUTS``."""
    set_bytes = tuple((at, bytes(run)) for at, run in _runs(layout.defaults))
    return (layout.offsets, layout.none_is_null, set_bytes) in KNOWN_LAYOUTS


def _runs(data: bytes) -> list[tuple[int, bytearray]]:
    """The runs of nonzero bytes of ``data``: (offset, bytes)."""
    runs: list[tuple[int, bytearray]] = []
    for at, byte in enumerate(data):
        if not byte:
            continue
        if runs and runs[-1][0] + len(runs[-1][1]) == at:
            runs[-1][1].append(byte)
        else:
            runs.append((at, bytearray([byte])))
    return runs


def message_layout(message_type: Any) -> Layout | None:
    """``message_type``'s layout, or None: a field not in exactly one place, a byte the
    constructor sets from no argument it was given, an object it holds but was not given."""
    if not _fixed_c_type(message_type):
        return None
    try:
        (a, a_holds), (b, b_holds) = _probe(message_type, 0, b"k0"), _probe(message_type, 1, b"k1")
        blank, keyless = message_type.__new__(message_type), _probe(message_type, 2, None)[0]
    except Exception:  # noqa: BLE001 (another constructor: whatever it raises, no layout)
        return None
    a_mem, b_mem, blank_mem = _memory(a), _memory(b), _memory(blank)
    offsets = _places(a_mem, b_mem, a_holds, b_holds)
    defaults = None if offsets is None else _defaults(a_mem, b_mem, blank_mem, offsets)
    if offsets is None or defaults is None:
        return None
    objects = (offsets[0], offsets[3], offsets[4])  # (topic, key, value)
    key_none = struct.unpack_from(_POINTER, _memory(keyless), offsets[3])[0]
    if (any(struct.unpack_from(_POINTER, blank_mem, at)[0] for at in objects)
            or key_none not in (0, id(None))
            or not _holds_only(a, {a_holds[i] for i in (0, 3, 4)})):  # fmt: skip
        return None
    return Layout(offsets, key_none == 0, defaults)


def _fixed_c_type(message_type: Any) -> bool:
    """A type of C (not a heap type: Python's, a subclass) of one fixed size, no dict."""
    return (isinstance(message_type, type) and message_type.__itemsize__ == 0
            and message_type.__dictoffset__ == 0 and message_type.__basicsize__ > _HEAD
            and not message_type.__flags__ & _HEAPTYPE)  # fmt: skip


def _places(a_mem: bytes, b_mem: bytes, a_holds: tuple[Any, ...],
            b_holds: tuple[Any, ...]) -> tuple[int, ...] | None:  # fmt: skip
    """Each field's one offset where both probes hold what they were given, or None."""
    offsets = []
    for fmt, held_a, held_b in zip(FORMATS, a_holds, b_holds, strict=True):
        width = struct.calcsize(fmt)
        places = [at for at in range(_HEAD, len(a_mem) - width + 1, width)
                  if struct.unpack_from(fmt, a_mem, at)[0] == held_a
                  and struct.unpack_from(fmt, b_mem, at)[0] == held_b]  # fmt: skip
        if len(places) != 1:
            return None
        offsets.append(places[0])
    return tuple(offsets)


def _defaults(a_mem: bytes, b_mem: bytes, blank_mem: bytes,
              offsets: tuple[int, ...]) -> bytes | None:  # fmt: skip
    """What the constructor sets whatever its arguments (the fields zero), or None: a byte
    that differs between the probes, or that it set over a nonzero byte of its tp_new's."""
    covered = {at + i for at, fmt in zip(offsets, FORMATS, strict=True)
               for i in range(struct.calcsize(fmt))}  # fmt: skip
    defaults = bytearray(len(a_mem))
    for i in range(_HEAD, len(a_mem)):
        if i in covered:
            continue
        if a_mem[i] != b_mem[i] or blank_mem[i] not in (0, a_mem[i]):
            return None
        defaults[i] = a_mem[i]
    return bytes(defaults)


def _holds_only(message: Any, addresses: set[int]) -> bool:
    """``message`` refers to exactly the objects at ``addresses`` (None aside), as its
    traverse tells."""
    held = {id(obj) for obj in gc.get_referents(message)}
    return held == addresses - {id(None)}


def checked_layout(message_type: Any) -> bool:
    """Use ``message_type``'s layout in the C serve if it is a known one and makes the same
    Message as its constructor for every value below (else the constructor stays in use)."""
    if use_message_layout is None or layout_message is None:
        return False
    try:
        found = message_layout(message_type)
    except ImportError:  # (no ctypes)
        return False
    if found is None or not _known(found):
        return False
    use_message_layout(message_type, *found)
    if not all(same_as_constructed(message_type, *_fresh(case)) for case in CHECKS):
        use_message_layout(None, (), False, b"")
        return False
    return True


# (topic, partition, offset, key, value, tstype, timestamp, latency): edges of each field
CHECKS = [("checked", 0, 0, None, None, 1, 0, 0.0),
          ("checked", 15, 2**40, b"key", b"value", 1, 1_700_000_000_123, 3e-6),
          ("checked", 2**31 - 1, 2**63 - 1, b"", b"", 1, -1, 2.675),
          ("checked", 7, -1, None, b"v" * 100, 1, 2**62, 2.1e-05),
          ("checked", -1, -2**63, b"k", None, 1, -2**63, -0.1),
          ("checked", -5, -1001, b"k", b"v", 1, 5, 1234.5678)]  # fmt: skip


SHARED_REFS = 100


def _fresh(case: tuple[Any, ...]) -> tuple[Any, ...]:
    """``case`` with a new object for each of its topic, key and value (a literal is
    shared: its count moves with other code's), so that their counts are checked."""

    def fresh(obj: Any) -> Any:
        if isinstance(obj, bytes):
            return bytes(bytearray(obj))
        return "".join(list(obj)) if isinstance(obj, str) else obj

    topic, partition, offset, key, value, *rest = case
    return (fresh(topic), partition, offset, fresh(key), fresh(value), *rest)


def same_as_constructed(message_type: Any, *case: Any) -> bool:
    """The layout's Message of ``case`` is the constructor's: its memory byte for byte (so
    every field, the objects it holds by address), its accessors, ``==``; and it gives
    back what it held when it goes."""
    assert layout_message is not None
    held = [obj for obj in (case[0], case[3], case[4]) if obj is not None]
    # (an object shared this widely, "" or b"", is counted by other code meanwhile too)
    counted = [obj for obj in held if sys.getrefcount(obj) < SHARED_REFS]
    collecting = gc.isenabled()
    gc.disable()  # (a collection meanwhile may free other garbage that held them)
    try:
        counts = [sys.getrefcount(obj) for obj in counted]
        made, twin = layout_message(*case), _constructed(message_type, *case)
        same = (_memory(made) == _memory(twin) and _fields(made) == _fields(twin)
                and made == twin and _holds_only(made, {id(obj) for obj in held}))  # fmt: skip
        del made, twin
        return same and [sys.getrefcount(obj) for obj in counted] == counts
    finally:
        if collecting:
            gc.enable()


def _constructed(message_type: Any, topic: str, partition: int, offset: int, key: Any,
                 value: Any, tstype: int, timestamp: int, latency: float) -> Any:  # fmt: skip
    return message_type(topic, partition, offset, key, value, None, None, (tstype, timestamp),
                        latency)  # fmt: skip


def _fields(message: Any) -> tuple[Any, ...]:
    """Everything a report's callback can read of a Message, and its type."""
    return (type(message), message.topic(), message.partition(), message.offset(),
            message.key(), message.value(), message.headers(), message.error(),
            message.timestamp(), message.latency(), message.leader_epoch())  # fmt: skip


LAYOUT_IN_USE = PEER_INSTALLED and checked_layout(Message)
