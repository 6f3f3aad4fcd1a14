"""Hypothesis strategies derived from the message schemas: any valid message at a version."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from hypothesis import strategies as st

from shmkafka.protocol.schema import Array, FieldSpec

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _of_type(t: Any, version: int) -> st.SearchStrategy[Any]:
    if isinstance(t, Array):
        return st.lists(_of_type(t.element, version), max_size=3).map(tuple)
    if isinstance(t, type):
        return message_at(t, version)
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return st.uuids().map(lambda u: uuid.UUID(int=u.int))
    raise AssertionError(t)


def message_at(cls: type[Any], version: int) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` whose fields absent at ``version`` keep their defaults."""
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in dataclasses.fields(cls):
        spec: FieldSpec = f.metadata["kafka"]
        if not spec.present(version):
            continue
        strategy = _of_type(spec.type, version)
        if spec.is_nullable(version):
            strategy = st.none() | strategy
        kwargs[f.name] = strategy
    return st.builds(cls, **kwargs)
