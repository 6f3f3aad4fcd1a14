"""The C fast path's object: initialised once, closed once, and argument errors that name
the function and the argument, as CPython's own do."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from shmkafka.pool import fastpath
from shmkafka.pool.shared_pool import SharedPool
from tests.conftest import publish

FastAppend = fastpath.FastAppend

pytestmark = pytest.mark.skipif(FastAppend is None, reason="C fast path not built")


@pytest.fixture
def args(pool: SharedPool, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, ...]]:
    """The constructor arguments ``fastpath.fast_path_for`` gives for ``pool``, with a
    memoryview of the test's own as the buffer (so a leaked buffer export shows)."""
    seen: list[tuple[Any, ...]] = []

    def record(*given: Any) -> Any:
        seen.append(given)
        return FastAppend(*given)

    monkeypatch.setattr(fastpath, "FastAppend", record)
    made = fastpath.fast_path_for(pool)
    assert made is not None
    made.close()
    view = memoryview(pool.segment.buf)
    yield (view, *seen[0][1:])
    view.release()  # BufferError if a FastAppend still held the view


def test_a_second_init_raises_and_changes_nothing(pool: SharedPool, args: tuple[Any, ...]) -> None:
    publish(pool, {"t": 1})
    deque_id = pool.directory.snapshot().topics["t"][0].deque_id
    fast = FastAppend(*args)
    before = fast.offsets()
    other = {**args[2], "b_created": args[2]["b_created"] + 8}
    with pytest.raises(RuntimeError, match=r"FastAppend.__init__\(\) called twice"):
        fast.__init__(args[0], args[1], other, args[3])  # type: ignore[misc]
    assert fast.offsets() == before
    # it still works: no batch is open, so it asks for one; then it appends to one
    assert fast.append_kv(deque_id, 1000, b"k", b"v", 0, -1) is None
    route = (pool.directory.version(), (deque_id,))
    assert isinstance(fast.send_kv(route, 0, b"k", b"v"), tuple)
    hit = fast.append_kv(deque_id, 1000, b"k", b"v", 0, -1)
    assert hit is not None and hit[2] == 1  # the second record of the batch
    # resolved at an older version: nothing is written, the slow path resolves again
    version = pool.directory.version()
    assert fast.append_kv(deque_id, 1000, b"k", b"v", 0, version - 1) is None
    assert fast.send_kv((version - 1, (deque_id,)), 0, b"k", b"v") is None
    hit = fast.append_kv(deque_id, 1000, b"k", b"v", 0, version)
    assert hit is not None and hit[2] == 2  # the stale calls appended nothing
    fast.close()
    fast.close()  # a second close is harmless
    with pytest.raises(ValueError, match=r"append_kv\(\) on a closed FastAppend"):
        fast.append_kv(deque_id, 1000, b"k", b"v", 0, -1)
    with pytest.raises(RuntimeError, match="called twice"):
        fast.__init__(*args)  # type: ignore[misc]


def test_a_failed_init_releases_what_it_took(args: tuple[Any, ...]) -> None:
    fast = FastAppend.__new__(FastAppend)
    with pytest.raises(OSError):
        fast.__init__(args[0], args[1], args[2], args[3] + "-missing")  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"append\(\) on an uninitialized FastAppend"):
        fast.append(0, 0, b"", 0, -1)
    fast.__init__(*args)  # type: ignore[misc]  # it may still be initialised, once
    fast.close()


def test_argument_errors_name_the_function_and_the_argument(args: tuple[Any, ...]) -> None:
    view, names, layout, pool_lock = args[:4]
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: FastAppend(), TypeError, r"FastAppend\(\) missing required argument 'buffer'"),
        (
            lambda: FastAppend(view, tuple(names), layout, pool_lock),
            TypeError,
            r"FastAppend\(\) argument 'semaphores' must be list, not tuple",
        ),
        (
            lambda: FastAppend(view, names, list(layout), pool_lock),
            TypeError,
            r"FastAppend\(\) argument 'layout' must be dict, not list",
        ),
        (
            lambda: FastAppend(view, names, layout, 5),
            TypeError,
            r"FastAppend\(\) argument 'pool_lock' must be str, not int",
        ),
        (
            lambda: FastAppend(view, [], layout, pool_lock),
            ValueError,
            r"FastAppend\(\) argument 'semaphores' must not be empty",
        ),
        (
            lambda: FastAppend(view, names, {**layout, "d_ends": "8"}, pool_lock),
            TypeError,
            r"FastAppend\(\) argument 'layout': 'd_ends' must be int, not str",
        ),
        (
            lambda: FastAppend(view, names, {**layout, "d_ends": -8}, pool_lock),
            ValueError,
            r"FastAppend\(\) argument 'layout': 'd_ends' must not be negative",
        ),
        (
            lambda: FastAppend(view, names, {**layout, "slabs_at": len(view)}, pool_lock),
            ValueError,
            r"FastAppend\(\) argument 'layout' does not fit argument 'buffer'",
        ),
    ]
    for make, error, message in cases:
        with pytest.raises(error, match=message):
            make()
    fast = FastAppend(*args)
    try:
        calls: list[tuple[Any, str]] = [
            (lambda: fast.append(1, 2), r"append\(\) takes exactly 5 arguments \(2 given\)"),
            (
                lambda: fast.append_kv(1, 2, 3),
                r"append_kv\(\) takes exactly 6 arguments \(3 given\)",
            ),
            (lambda: fast.send_kv(), r"send_kv\(\) takes exactly 4 arguments \(0 given\)"),
            (
                lambda: fast.append("0", 0, b"", 0, -1),
                r"append\(\) argument 'deque_id' must be int, not str",
            ),
            (
                lambda: fast.append(0, 0.5, b"", 0, -1),
                r"append\(\) argument 'timestamp_ms' must be int, not float",
            ),
            (
                lambda: fast.append(0, 0, "", 0, -1),
                r"append\(\) argument 'tail' must be bytes, not str",
            ),
            (
                lambda: fast.append_kv(0, 0, "k", None, 0, -1),
                r"append_kv\(\) argument 'key' must be bytes or None, not str",
            ),
            (
                lambda: fast.append_kv(0, 0, None, 1, 0, -1),
                r"append_kv\(\) argument 'value' must be bytes or None, not int",
            ),
            (
                lambda: fast.send_kv([0, (0,)], 0, b"k", None),
                r"send_kv\(\) argument 'route' must be \(version, deque_ids\)",
            ),
            (
                lambda: fast.send_kv((0, ()), 0, b"k", None),
                r"send_kv\(\) argument 'route': deque_ids must be a non-empty tuple",
            ),
            (
                lambda: fast.send_kv((0, (0,)), "0", b"k", None),
                r"send_kv\(\) argument 'partition' must be int, not str",
            ),
        ]
        for call, message in calls:
            with pytest.raises(TypeError, match=message):
                call()
    finally:
        fast.close()


def test_the_methods_have_signatures() -> None:
    assert (
        str(inspect.signature(FastAppend))
        == "(buffer, semaphores, layout, pool_lock, lockdep=None)"
    )
    assert str(inspect.signature(FastAppend.send_kv)) == "(self, route, partition, key, value, /)"
    assert str(inspect.signature(FastAppend.offsets)) == "(self, /)"
