"""The C append fast path (``_append.c``) for one pool: built and allowed, and given the
pool's memory map, its slot and its lock semaphores. Its Python twin, the append of
``accumulator.py``, is the reference and serves when this gives None."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from shmkafka.pool import native
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.records import HEADER_SIZE
from shmkafka.shm.layout import FIRST_STRIPE_LOCK, POOL_LOCK
from shmkafka.shm.segment import semaphore_name

if TYPE_CHECKING:
    from shmkafka.pool._append import FastAppend
else:
    try:
        native.check()
        from shmkafka.pool._append import FastAppend
    except ImportError:  # not built (no C compiler): the pure-Python path serves
        FastAppend = None

__all__ = ["FastAppend", "fast_path_for"]
log = logging.getLogger("shmkafka.producer")
_warned_not_built = False


def fast_path_for(pool: SharedPool) -> FastAppend | None:
    """The pool's C fast path, or None (not built, or ``SHMKAFKA_PURE_PYTHON``)."""
    global _warned_not_built
    if FastAppend is None and not _warned_not_built:
        _warned_not_built = True
        log.warning(
            "shmkafka's C extension was not built (no C compiler at install?): every send "
            "runs in Python, about 10x slower; reinstall with gcc and the Python headers"
        )
    if FastAppend is None or native.turned_off():
        return None
    offsets = pool.layout.fast_path_offsets(pool.slot)
    offsets.update(
        slot=pool.slot, pid=pool.pid, started=pool.started, record_batch_header=HEADER_SIZE
    )
    names = [
        semaphore_name(pool.name, "l", FIRST_STRIPE_LOCK + i)
        for i in range(pool.config.lock_stripes)
    ]
    return FastAppend(pool.segment.buf, names, offsets, semaphore_name(pool.name, "l", POOL_LOCK))
