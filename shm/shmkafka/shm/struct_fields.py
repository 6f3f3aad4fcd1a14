"""Where the fields of a little-endian ``struct.Struct`` lie: layout.py checks each named
offset of the memory map against the struct that packs its field (at import)."""

from __future__ import annotations

import re
import struct


def field_offsets(layout: struct.Struct, at: int = 0) -> list[int]:
    """Where each field of a little-endian struct starts (pad bytes are no field)."""
    offsets, size = [], 0
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", layout.format.lstrip("<")):
        n = int(count or 1)
        repeat = 1 if code == "s" else 0 if code == "x" else n
        for _ in range(repeat):
            offsets.append(at + size)
            size += struct.calcsize("<" + code) if code != "s" else n
        size += n if code == "x" else 0
    assert size == layout.size
    return offsets


def names_match(layout: struct.Struct, names: tuple[int | None, ...], at: int = 0) -> bool:
    """The named offsets are the struct's fields, in order (None: a reserved field)."""
    found = field_offsets(layout, at)
    return len(found) == len(names) and all(
        n in (None, f) for f, n in zip(found, names, strict=True)
    )
