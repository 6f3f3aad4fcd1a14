"""A declarative codec for Kafka message structs, in the spirit of Kafka's JSON message specs.

Messages are frozen dataclasses whose fields carry a ``FieldSpec`` (declared with ``kf``):
wire type, versions, nullable versions, and tag for tagged fields. ``encode_struct`` and
``decode_struct`` walk those specs for one version; the walk is compiled once per
(class, version, flexible) and cached.

Rules:
- A field outside its ``versions`` is not on the wire; decoding gives its default.
- In flexible versions, strings, bytes and arrays are compact and every struct ends with a
  tagged-field section; tagged fields equal to their default are not written.
- ``None`` is accepted only where the version is within ``nullable``.
- Unknown tags are skipped on decode, as Kafka requires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from shmkafka.protocol.errors import DecodeError, EncodeError
from shmkafka.protocol.primitives import ZERO_UUID, Reader, Writer

MAX_VERSION = 0x7FFF


def parse_versions(spec: str | None) -> tuple[int, int]:
    """'3+' → (3, MAX), '0-12' → (0, 12), '4' → (4, 4), None/'none' → empty range."""
    if spec is None or spec == "none":
        return (1, 0)
    if spec.endswith("+"):
        return (int(spec[:-1]), MAX_VERSION)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


@dataclass(frozen=True)
class Array:
    """An array of a primitive type name or of a struct class."""

    element: str | type[Any]


WireType = str | Array | type[Any]


@dataclass(frozen=True)
class FieldSpec:
    type: WireType
    versions: tuple[int, int]
    nullable: tuple[int, int]
    tag: int | None
    tagged: tuple[int, int]

    def present(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and self.tagged[0] <= version <= self.tagged[1]

    def is_nullable(self, version: int) -> bool:
        return self.nullable[0] <= version <= self.nullable[1]


_DEFAULTS: dict[str, object] = {
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": ZERO_UUID,
    "float64": 0.0,
}


def kf(
    type_: WireType,
    versions: str = "0+",
    *,
    nullable: str | None = None,
    tag: int | None = None,
    tagged: str | None = None,
    default: Any = dataclasses.MISSING,
) -> Any:
    """Declare a Kafka field on a message dataclass (returns a ``dataclasses.field``)."""
    spec = FieldSpec(
        type=type_,
        versions=parse_versions(versions),
        nullable=parse_versions(nullable),
        tag=tag,
        tagged=parse_versions(tagged) if tag is not None else (1, 0),
    )
    metadata = {"kafka": spec}
    if default is not dataclasses.MISSING:
        return dataclasses.field(default=default, metadata=metadata)
    if isinstance(type_, Array):
        return dataclasses.field(default=(), metadata=metadata)
    if isinstance(type_, type):
        return dataclasses.field(default_factory=type_, metadata=metadata)
    return dataclasses.field(default=_DEFAULTS.get(type_, 0), metadata=metadata)


class Message:
    """Base of request and response bodies: which API and versions a class encodes."""

    API_KEY: ClassVar[int]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FLEXIBLE_FROM: ClassVar[int]

    def encode(self, version: int) -> bytes:
        return b"".join(self.encode_into(Writer(), version).take_pieces())

    def encode_into(self, w: Writer, version: int) -> Writer:
        """Encode the body after what ``w`` holds (a by-reference writer keeps large
        records blobs as pieces)."""
        check_version(type(self), version)
        encode_struct(w, self, version, version >= self.FLEXIBLE_FROM)
        return w

    @classmethod
    def decode(cls: type[M], data: bytes | memoryview, version: int, *, strict: bool = True) -> M:
        """Decode a body. ``strict=False`` ignores trailing bytes, as the Java client and
        kafka-python do for responses (librdkafka's mock cluster appends one to Metadata)."""
        check_version(cls, version)
        r = Reader(data)
        msg = decode_struct(r, cls, version, version >= cls.FLEXIBLE_FROM, cls.__name__)
        if strict and r.remaining():
            raise DecodeError(cls.__name__, r.pos, f"{r.remaining()} trailing bytes")
        return msg


M = TypeVar("M", bound=Message)
T = TypeVar("T")


def check_version(cls: type[Message], version: int) -> None:
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise EncodeError(
            f"{cls.__name__} supports versions {cls.MIN_VERSION}-{cls.MAX_VERSION}, not {version}"
        )


Encoder = Callable[[Writer, Any], None]
Decoder = Callable[[Reader], Any]


@dataclass(frozen=True)
class _Slot:
    name: str
    spec: FieldSpec
    nullable: bool
    encode: Encoder
    decode: Decoder


@dataclass(frozen=True)
class _Plan:
    regular: tuple[_Slot, ...]
    tagged: tuple[tuple[int, _Slot], ...]
    by_tag: dict[int, _Slot]


_PLANS: dict[tuple[type[Any], int, bool], _Plan] = {}


def _plan(cls: type[Any], version: int, flexible: bool) -> _Plan:
    key = (cls, version, flexible)
    plan = _PLANS.get(key)
    if plan is None:
        regular: list[_Slot] = []
        tagged: list[tuple[int, _Slot]] = []
        for f in dataclasses.fields(cls):
            spec: FieldSpec = f.metadata["kafka"]
            if not spec.present(version):
                continue
            what = f"{cls.__name__}.{f.name}"
            enc, dec = _codec(spec.type, version, flexible, what)
            slot = _Slot(f.name, spec, spec.is_nullable(version), enc, dec)
            if spec.is_tagged(version):
                assert spec.tag is not None
                tagged.append((spec.tag, slot))
            else:
                regular.append(slot)
        tagged.sort(key=lambda item: item[0])
        plan = _Plan(tuple(regular), tuple(tagged), dict(tagged))
        _PLANS[key] = plan
    return plan


def _codec(t: WireType, version: int, flexible: bool, what: str) -> tuple[Encoder, Decoder]:
    if isinstance(t, Array):
        return _array_codec(t.element, version, flexible, what)
    if isinstance(t, type):
        cls = t

        def enc_struct(w: Writer, v: Any) -> None:
            encode_struct(w, v, version, flexible)

        def dec_struct(r: Reader) -> Any:
            return decode_struct(r, cls, version, flexible, what)

        return enc_struct, dec_struct
    return _primitive_codec(t, flexible, what)


def _primitive_codec(t: str, flexible: bool, what: str) -> tuple[Encoder, Decoder]:
    fixed: dict[str, tuple[Encoder, Decoder]] = {
        "int8": (Writer.int8, lambda r: r.int8(what)),
        "int16": (Writer.int16, lambda r: r.int16(what)),
        "uint16": (Writer.uint16, lambda r: r.uint16(what)),
        "int32": (Writer.int32, lambda r: r.int32(what)),
        "int64": (Writer.int64, lambda r: r.int64(what)),
        "float64": (Writer.float64, lambda r: r.float64(what)),
        "bool": (Writer.boolean, lambda r: r.boolean(what)),
        "uuid": (Writer.uuid, lambda r: r.uuid(what)),
    }
    if t in fixed:
        return fixed[t]
    if t == "string":
        return (lambda w, v: w.string(v, flexible)), (lambda r: r.string(flexible, what))
    if t in ("bytes", "records"):
        return (lambda w, v: w.bytes_(v, flexible)), (lambda r: r.bytes_(flexible, what))
    raise TypeError(f"unknown wire type {t!r} for {what}")


def _array_codec(
    element: str | type[Any], version: int, flexible: bool, what: str
) -> tuple[Encoder, Decoder]:
    enc_item, dec_item = _codec(element, version, flexible, what + "[]")

    def enc(w: Writer, items: Sequence[Any] | None) -> None:
        w.length(None if items is None else len(items), flexible)
        for item in items or ():
            enc_item(w, item)

    def dec(r: Reader) -> tuple[Any, ...] | None:
        n = r.length(flexible, what)
        if n is None:
            return None
        if n > r.remaining():
            raise DecodeError(
                what, r.pos, f"array of {n} items cannot fit in {r.remaining()} bytes"
            )
        return tuple(dec_item(r) for _ in range(n))

    return enc, dec


def _default_of(cls: type[Any], name: str) -> Any:
    f = cls.__dataclass_fields__[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()


def encode_struct(w: Writer, obj: Any, version: int, flexible: bool) -> None:
    cls = type(obj)
    plan = _plan(cls, version, flexible)
    for slot in plan.regular:
        value = getattr(obj, slot.name)
        if value is None and not slot.nullable:
            raise EncodeError(f"{cls.__name__}.{slot.name} is not nullable in version {version}")
        try:
            slot.encode(w, value)
        except EncodeError as exc:
            raise EncodeError(f"{cls.__name__}.{slot.name}: {exc}") from None
    if not flexible:
        return
    present = [
        (tag, slot, value)
        for tag, slot in plan.tagged
        if (value := getattr(obj, slot.name)) != _default_of(cls, slot.name)
    ]
    w.uvarint(len(present))
    for tag, slot, value in present:
        inner = Writer()
        slot.encode(inner, value)
        w.uvarint(tag)
        w.uvarint(len(inner.buf))
        w.raw(inner.buf)


def decode_struct(r: Reader, cls: type[T], version: int, flexible: bool, what: str) -> T:
    plan = _plan(cls, version, flexible)
    values: dict[str, Any] = {}
    for slot in plan.regular:
        values[slot.name] = slot.decode(r)
    if flexible:
        count = r.uvarint(what + " tagged field count")
        for _ in range(count):
            tag = r.uvarint(what + " tag")
            size = r.uvarint(what + " tagged field size")
            start = r.pos
            r.raw(size, what + f" tag {tag}")
            tagged_slot = plan.by_tag.get(tag)
            if tagged_slot is not None:  # unknown tags are skipped
                values[tagged_slot.name] = tagged_slot.decode(Reader(r.buf, start, start + size))
    return cls(**values)
