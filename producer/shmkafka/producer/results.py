"""The results of a client's records: completions from the Sender resolve their futures,
and records whose result can no longer come are failed (a base of client.py's Client: the
fields below are the client's).

Rules:
- A completion resolves, under the client's lock, every future its batch registration
  (batch id << 32 | generation) holds in the delta range it covers; ``on_done`` (a facade's
  report queue) gets them before their callbacks run, and a flush counts them pending until
  it has them (``_handing_over``).
- A failure decided here (``fail_pending``: a purge, a close, a lost result) is a local
  completion: the first outcome of a future stands, so a result that comes later is not
  reported.
- Twice a second the completion thread fails with ``ResultLostError`` the records whose batch
  no longer holds them at two checks in a row and whose result did not come (liveness.py).
- A completed batch's wait stays ``RETIRE_S`` for registrations still on their way.
- ``batch_listener``, when set, hears each batch result before its reports and callbacks
  run; what it raises is logged, never in the way of a result.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from shmkafka.pool.errors import ResultLostError, completion_error, kafka_errors
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer import liveness
from shmkafka.producer.futures import Future
from shmkafka.producer.process_slot import ProcessSlot
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.layout import IN_FLIGHT
from shmkafka.shm.rings import Completion

RETIRE_S = 5.0  # a completed batch's wait stays this long for registrations still in flight
log = logging.getLogger("shmkafka.producer")

# Process-wide: called by the completion thread with each batch result's resolved futures
# and its completion, before their reports and callbacks (shmkafka.otel reads the Sender's
# view of the batch here). None: nothing is called.
batch_listener: Callable[[list[Future], Completion], None] | None = None


class Results:
    pool: SharedPool
    slot: ProcessSlot
    _tracker: Any
    _lock: threading.Lock
    _cond: threading.Condition
    _handing_over: int
    _next_retire: float
    _next_liveness: float
    _suspects: set[int]
    # Called (by the completion thread, or by send for a record resolved at once) with
    # the futures just resolved, in offset order per batch.
    on_done: Callable[[list[Future]], None] | None

    def _on_completion(self, completion: Completion, local: KafkaError | None = None) -> None:
        registration = (completion.batch_id << 32) | completion.generation
        error = local or completion_error(completion)
        on_done = self.on_done
        with self._lock:  # (the condition's lock)
            covered = self._tracker.complete(
                registration, completion.first_delta, completion.last_delta, completion,
                error, local is not None, time.monotonic() + RETIRE_S,
            )  # fmt: skip
            handing = len(covered) if covered and on_done is not None else 0
            self._handing_over += handing  # (done, not yet with on_done: still pending)
            if getattr(self._cond, "_waiters", True):  # (CPython's waiters; a paced app
                self._cond.notify_all()  # has none: a test, not three Python calls)
        if not covered:
            return
        listener = batch_listener
        if listener is not None:
            try:
                listener(covered, completion)
            except Exception:
                log.exception("the batch listener raised")
        if on_done is not None and handing:
            try:
                on_done(covered)
            finally:
                with self._lock:
                    self._handing_over -= handing
        for future in covered:
            if future._callbacks:
                future._run_callbacks()

    def fail_pending(
        self, error: KafkaError, *, select: Callable[[int], bool] | None = None
    ) -> int:
        """Resolve every future of this process still pending (of the batch registrations
        ``select`` accepts) with ``error``; returns how many. Their records stay in the pool
        and the Sender may still deliver them; a result that arrives later is not reported
        (the first outcome of a future stands)."""
        with self._lock:
            pending = [(r, n) for r, n in self._tracker.pending() if select is None or select(r)]
        for registration, _ in pending:
            failure = Completion(registration >> 32, registration & 0xFFFFFFFF, -1, -1, -1, -1)
            self._on_completion(failure, error)
        return sum(count for _, count in pending)

    def in_flight(self, registration: int) -> bool:
        """The batch of this registration (batch id << 32 | generation) is being sent."""
        with kafka_errors:
            info = self.pool.batches.read(registration >> 32)
        return info.state == IN_FLIGHT and info.generation == registration & 0xFFFFFFFF

    def check_liveness(self, now: float) -> None:
        """The completion thread, every ``liveness.CHECK_S``: fail the records whose batch no
        longer holds them, at two checks in a row, and whose result did not come
        (liveness.py's rules)."""
        if now < self._next_liveness:
            return
        self._next_liveness = now + liveness.CHECK_S
        with self._lock:
            pending = [registration for registration, _ in self._tracker.pending()]
        causes = liveness.unheld(self.pool, pending) if pending else {}
        if not causes:
            self._suspects = set()
            return
        self.slot.deliver()  # (results posted before their batch was freed)
        with self._lock:
            still = {r: n for r, n in self._tracker.pending() if r in causes}
        lost = {r: n for r, n in still.items() if r in self._suspects}
        self._suspects = set(still) - set(lost)
        if lost:
            self.pool.count_internal_errors(sum(lost.values()))
        for registration, records in lost.items():
            cause = f"no result can come for it: {causes[registration]}"
            log.error("internal error: %d record(s) of pool %r failed, %s", records,
                      self.pool.name, cause)  # fmt: skip
            self.fail_pending(ResultLostError(cause), select=registration.__eq__)

    def _retire(self, now: float) -> None:
        """Forget waits whose records are all done, ``RETIRE_S`` after their completion."""
        if now < self._next_retire:
            return
        self._next_retire = now + RETIRE_S / 10
        with self._lock:
            self._tracker.retire(now)
