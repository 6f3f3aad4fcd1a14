"""The C fast path and layout.py agree on the memory map: the C code reads every offset from
``fastpath.fast_path_offsets`` (exactly its keys, and nothing else), and spells no field
offset as a number of its own."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from shmkafka.pool import accumulator, fastpath
from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm import layout as L
from shmkafka.shm.layout import Layout

FOLDER = Path(accumulator.__file__).parent
SOURCES = (
    "_append.c",
    "_append_setup.c",
    "_append_write.c",
    "_append_drain.c",
    "_append_post.c",
    "_append_internal.h",
)


def source() -> str:
    """The C append's code, all its files."""
    return "\n".join((FOLDER / name).read_text() for name in SOURCES)


pytestmark = pytest.mark.skipif(fastpath.FastAppend is None, reason="C fast path not built")


def expected(layout: Layout, slot: int) -> dict[str, int]:
    """What each key the C code reads must be, from layout.py's named constants and region
    offsets (independently of ``fast_path_offsets``)."""
    config = layout.config
    return {
        "directory_version_at": L.H_DIRECTORY_VERSION,
        "sender_wake_at": L.H_SENDER_WAKE_AT,
        "sender_linger_at": L.H_SENDER_LINGER,
        "new_batches_at": L.H_NEW_BATCHES,
        "waitq_head_at": L.H_WAITQ_HEAD,
        "waitq_tail_at": L.H_WAITQ_TAIL,
        "alloc_cursor_at": L.H_ALLOC_CURSOR,
        "locks_at": layout.lock_at(0),
        "lock_stride": layout.lock_at(1) - layout.lock_at(0),
        "lock_owner_slot": L.LOCK_OWNER_SLOT,
        "lock_owner_pid": L.LOCK_OWNER_PID,
        "lock_owner_start": L.LOCK_OWNER_START,
        "pool_lock": L.POOL_LOCK,
        "first_stripe": L.FIRST_STRIPE_LOCK,
        "intent_at0": layout.intent_at(slot, 0),
        "pending_first_at": layout.slot_at(slot) + L.S_PENDING,
        "pending_count_at": layout.slot_at(slot) + L.S_PENDING_COUNT,
        "no_slab": L.NO_SLAB,
        "deques_at": layout.deque_at(0),
        "deque_size": layout.deque_at(1) - layout.deque_at(0),
        "d_ends": L.D_ENDS,
        "no_batch": L.NO_BATCH,
        "active_at": layout.active_byte_at(0),
        "b_next": L.B_NEXT,
        "d_sticky": L.D_STICKY,
        "d_run_hint": L.D_RUN_HINT,
        "batches_at": layout.batch_at(0),
        "batch_stride": layout.batch_at(1) - layout.batch_at(0),
        "b_state": L.B_STATE,
        "b_generation": L.B_GENERATION,
        "b_deque": L.B_DEQUE,
        "b_first_slab": L.B_FIRST_SLAB,
        "b_slab_count": L.B_SLAB_COUNT,
        "b_attempts": L.B_ATTEMPTS,
        "b_publish": L.B_PUBLISH,
        "b_write_pos": L.B_WRITE_POS,
        "b_record_count": L.B_RECORD_COUNT,
        "b_max_ts": L.B_MAX_TS,
        "b_last_append": L.B_LAST_APPEND,
        "b_base_ts": L.B_BASE_TS,
        "b_created": L.B_CREATED,
        "b_producer_id": L.B_PRODUCER_ID,
        "b_producer_epoch": L.B_PRODUCER_EPOCH,
        "b_base_sequence": L.B_BASE_SEQUENCE,
        "appenders_at": layout.appenders_of(0),
        "appenders_size": layout.appenders_of(1) - layout.appenders_of(0),
        "b_parent": L.B_PARENT,
        "b_parent_generation": L.B_PARENT_GENERATION,
        "b_parent_delta": L.B_PARENT_DELTA,
        "no_parent": L.NO_PARENT,
        "b_recovered": L.B_RECOVERED,
        "free_state": L.FREE,
        "open_state": L.OPEN,
        "sealed_state": L.SEALED,
        "in_flight_state": L.IN_FLIGHT,
        "freemap_at": layout.freemap_at,
        "num_slabs": config.num_slabs,
        "slabs_at": layout.slab_at(0),
        "slab_size": layout.slab_at(1) - layout.slab_at(0),
        "max_run": config.batch_size // config.slab_size,
        "batch_max_records": config.batch_max_records,
        "record_limit": min(config.max_request_size, config.buffer_memory),
        "slots_high_at": L.H_SLOTS_HIGH,
        "max_processes": config.max_processes,
        "slots_at": layout.slot_at(0),
        "slot_size": layout.slot_at(1) - layout.slot_at(0),
        "s_ring_head": L.S_RING_HEAD,
        "s_ring_tail": L.S_RING_TAIL,
        "ring_at": layout.ring_entry_at(slot, 0) - layout.slot_at(slot),
        "ring_capacity": min(config.num_slabs, L.RING_CAP),
        "ring_entry_size": layout.ring_entry_at(0, 1) - layout.ring_entry_at(0, 0),
    }


def test_the_c_code_was_given_every_offset_as_layout_py_names_it(pool: SharedPool) -> None:
    acc = RecordAccumulator(pool)
    assert acc.fast_path is not None
    try:
        used = acc.fast_path.offsets()
        supplied = fastpath.fast_path_offsets(pool.layout, pool.slot)
        # the keys the C code reads are exactly the keys supplied: none unused, none missing
        assert set(used) == set(supplied)
        want = expected(pool.layout, pool.slot)
        assert set(want) == set(used)
        for key, value in used.items():
            assert value == want[key] == supplied[key], key
    finally:
        acc.close()


def _patched(
    monkeypatch: pytest.MonkeyPatch, change: Callable[[dict[str, int]], dict[str, int]]
) -> None:
    original = fastpath.fast_path_offsets
    monkeypatch.setattr(
        fastpath, "fast_path_offsets", lambda layout, slot: change(original(layout, slot))
    )


def test_the_c_code_reads_every_key_it_is_given(
    pool: SharedPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leave out any one key and the C constructor fails naming it; a changed value is the
    value it then holds (it reports what it reads, not constants of its own)."""
    supplied = fastpath.fast_path_offsets(pool.layout, pool.slot)
    assert len(supplied) > 40
    for key in supplied:
        with monkeypatch.context() as m:
            _patched(m, lambda d, key=key: {k: v for k, v in d.items() if k != key})  # type: ignore[misc]
            with pytest.raises(KeyError, match=key):
                fastpath.fast_path_for(pool)
    _patched(monkeypatch, lambda d: {**d, "b_created": d["b_created"] + 1})
    fast = fastpath.fast_path_for(pool)
    assert fast is not None
    try:
        assert fast.offsets()["b_created"] == L.B_CREATED + 1
    finally:
        fast.close()


@pytest.mark.parametrize(
    "key, value",
    [("no_batch", 0xFFFF), ("b_record_count", L.B_PUBLISH + 8), ("b_write_pos", L.B_PUBLISH + 4)],
)
def test_the_c_code_refuses_a_layout_its_stores_do_not_fit(
    pool: SharedPool, monkeypatch: pytest.MonkeyPatch, key: str, value: int
) -> None:
    """It takes 0xFFFFFFFF for no batch and publishes write_pos | record_count << 32 whole."""
    _patched(monkeypatch, lambda d: {**d, key: value})
    with pytest.raises(ValueError, match="layout"):
        fastpath.fast_path_for(pool)


# ---------------------------------------------------------------- no numbers for fields

# Calls that take a pointer into the segment first, and names of pointers into it.
ACCESSORS = r"rd32|rd64|wr32|wr64|store_release32|store_release64|memset|memcpy|memchr|copy_record"
ATOMICS = r"__atomic_\w+"
SEGMENT_POINTERS = r"buf|batch|deque|owner|freemap|intent|bits|publish|pending"
# Pointers to the start of a struct in the segment: a field of one is always named, the first
# too (``rd64(deque + self->d_head)``, not ``rd64(deque)``).
STRUCT_BASES = r"deque|batch|owner"
# Functions that read no segment memory: murmur2 walks the key's bytes in 4-byte words.
NOT_SEGMENT = ("murmur2",)
TOKEN = re.compile(r"0[xX][0-9a-fA-F]+|\d+|[A-Za-z_]\w*|->|>>|<<|\S")


def _argument(text: str, start: int, close: str) -> str:
    """The first argument (or the subscript) starting at ``start``, up to a top-level comma or
    the closing bracket."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            if depth == 0:
                return text[start:i]
            depth -= 1
        elif c == "," and depth == 0 and close == ")":
            return text[start:i]
    raise AssertionError(f"unbalanced at {text[start : start + 40]!r}")


def literal_offsets(expression: str) -> list[str]:
    """Numbers added to, subtracted from or multiplied into a pointer expression (index
    arithmetic such as ``tail - 1`` goes in a variable of its own)."""
    tokens = TOKEN.findall(expression)
    found = []
    for i, tok in enumerate(tokens):
        if tok[0].isdigit():
            before = tokens[i - 1] if i else ""
            after = tokens[i + 1] if i + 1 < len(tokens) else ""
            if before in ("+", "-", "*") or after in ("+", "-", "*"):
                found.append(f"{before} {tok} {after}".strip())
    return found


def _code(source: str) -> str:
    """The source without comments and without the functions that read no segment memory."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", source, flags=re.S)
    for name in NOT_SEGMENT:
        # its definition: from the line naming it (PEP 7 puts the return type on the line
        # before) to its closing brace in column 0
        code = re.sub(rf"\n(?:\w[^\n(]*\s)?{name}\(.*?\n}}\n", "\n", code, flags=re.S)
    return code


def unnamed_first_fields(source: str) -> list[str]:
    """Accesses to a struct's first field through its bare base pointer."""
    pattern = rf"\b(?:{ACCESSORS}|{ATOMICS})\s*\(\s*(?:{STRUCT_BASES})\s*[,)]"
    return re.findall(pattern, _code(source))


def pointer_expressions(source: str) -> list[str]:
    """Every expression that addresses segment memory: accessor calls' first argument,
    subscripts of segment pointers, and initialisers of ``char *`` variables."""
    code = _code(source)
    out = []
    for m in re.finditer(rf"\b(?:{ACCESSORS}|{ATOMICS})\s*\(", code):
        out.append(_argument(code, m.end(), ")"))
    for m in re.finditer(rf"\b(?:{SEGMENT_POINTERS})\s*\[", code):
        out.append(_argument(code, m.end(), "]"))
    out.extend(re.findall(r"\bchar\s*\*\s*\w+\s*=\s*([^;]+);", code))
    return out


def test_the_checker_sees_numeric_field_offsets() -> None:
    assert literal_offsets("owner + 8") == ["+ 8"]
    assert literal_offsets("publish + 4") == ["+ 4"]
    assert literal_offsets("deque + self->d_ring + 4 * (i % n)") == ["+ 4 *"]
    assert literal_offsets("(uint64_t *)(buf + 16)") == ["+ 16 )"]
    assert literal_offsets("batch + self->b_appenders + (self->slot >> 3)") == []
    assert literal_offsets("owner + self->lock_owner_pid") == []
    fake = "static void\nf(char *buf)\n{\n    wr64(buf + 8, 0);\n    char *p = buf + 16;\n}\n"
    assert [literal_offsets(e) for e in pointer_expressions(fake)] == [["+ 8"], ["+ 16"]]
    assert unnamed_first_fields("x = rd64(deque), y = rd64(deque + self->d_tail);") == [
        "rd64(deque)"
    ]


def test_the_c_code_spells_no_field_offset_as_a_number() -> None:
    expressions = pointer_expressions(source())
    assert len(expressions) > 40  # it found the accesses (the checker is not vacuous)
    offenders = {e.strip(): found for e in expressions if (found := literal_offsets(e))}
    assert offenders == {}
    assert unnamed_first_fields(source()) == []
