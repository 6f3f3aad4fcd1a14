"""``Client``: one producer object's link to the shared pool, in one process: attach, send,
futures, flush. The three drop-in APIs build on it.

Rules:
- ``send`` appends into the pool and returns a future registered in the wait of its batch
  (batch id, generation); the completion thread records each completion in that wait, which
  resolves all its futures at once. A completion may arrive before ``send`` registered its
  future (the Sender is fast), so a wait outlives its completion by ``RETIRE_S`` seconds
  and a late registration finds the outcome there.
- The common record (bytes key and value, no timestamp, at most 8 headers) never reaches
  this class: the facades' C entry (producer/_tracker_entry.c) checks, appends and registers
  it in one call. ``send`` serves the others (serializers, timestamps, a moved directory, a
  record the entry handed over), its own common case in one C call (``FastAppend.send_kv``).
- The producer makes sure a live Sender serves the pool (supervisor.py).
- Errors of the shared-memory pool leave this class only as Kafka errors (``kafka_error``):
  the facades above see nothing but the ``KafkaError`` tree.
- The completion thread also reads the pool's event ring (sender_events.py), and checks
  that every record still waiting is held by a batch (liveness.py): a record whose result
  can never come is failed with ResultLostError, never waited for.
- A client belongs to the process that made it. In a forked child, ``in_this_process`` makes
  the child's own (same config) on first use; the parent's is kept, untouched, so nothing of
  the parent's is released from the child.
- Keyed records go to ``(murmur2(key) & 0x7fffffff) % partitions`` as in the Java client;
  keyless ones stick to one partition, shared by all the pool's producers, until its batch
  fills (KIP-480 style); then they all move to a random one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

from shmkafka.pool import native
from shmkafka.pool.accumulator import RecordAccumulator, StaleRouteError
from shmkafka.pool.config import Config
from shmkafka.pool.errors import (
    SHM_ERRORS,
    KafkaTimeoutError,
    PoolSettingsMismatchError,
    kafka_error,
    kafka_errors,
)
from shmkafka.pool.sender_link import sender_semaphore, wake
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.entry import EntryBinding, verdict_of
from shmkafka.producer.forks import run_skipped_hooks
from shmkafka.producer.futures import FULL, NEW_BATCH, WAKE, Future, PyTracker
from shmkafka.producer.process_slot import ProcessSlot
from shmkafka.producer.results import Results
from shmkafka.producer.sender_events import SenderEvents, sender_logger
from shmkafka.producer.supervisor import (
    SENDER_STALL_MS,
    SENDER_START_BOUND_S,
    SenderSupervisor,
)
from shmkafka.producer.topics import TopicRequests, TopicWait
from shmkafka.producer.views import PoolView
from shmkafka.protocol.broker_errors import UnknownTopicOrPartitionError
from shmkafka.protocol.clock import monotonic_ms, wall_ms
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.hashing import murmur2_partition
from shmkafka.protocol.records import HeaderInput
from shmkafka.shm import faultpoints
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.rings import (
    Completion,
)
from shmkafka.shm.segment import Segment

try:
    native.check()
    from shmkafka.producer._tracker import Tracker
except ImportError:  # not built: futures.PyTracker serves
    Tracker = None  # type: ignore[assignment,misc]

SENDER_CHECK_S = 0.2


RELEASE_WAIT_S = 0.2  # how long release() waits for the completion thread to detach
log = logging.getLogger("shmkafka.producer")


# how often an asyncio send waiting for room in a full pool looks again (it awaits, never
# blocking its loop: the pool's own wait for memory would)
FULL_POOL_WAIT_S = 0.002
_inherited: list[Client] = []  # clients of the parent, in a forked child: never used


class Client(Results, SenderEvents, PoolView):
    @classmethod
    def open(cls, config: Config, *, sender_log: str | None = None) -> Client:
        """This process's client of the pool ``config`` names (made if it does not exist),
        with its Sender started."""
        name = config.chosen_pool_name
        try:
            client = cls(name, dataclasses.asdict(config.sender), pool_config=config.pool,
                         max_block_ms=config.max_block_ms,
                         memory_block_ms=config.memory_block_ms, sender_log=sender_log)  # fmt: skip
        except PoolSettingsMismatchError:
            with kafka_errors:
                segment = Segment.attach(name)
            try:
                stored = segment.stored_config()
            finally:
                segment.close()
            keys = "; ".join(config.differences(stored)) or "layout version"
            raise PoolSettingsMismatchError(
                f"pool {name!r} is shared with other settings: {keys}. One Sender "
                "serves a pool, so its producers must agree on these (or use another pool=)"
            ) from None
        client.config = config
        return client

    def in_this_process(self) -> Client:
        """This client, or in a forked child its own (opened on first use, with the same
        config, logging and token callback)."""
        if not self.pool.forked:
            return self
        assert self.config is not None, "a client made without a Config cannot be re-made"
        run_skipped_hooks()  # (a fork by libc's fork(): forks.py)
        _inherited.append(self)
        child = Client.open(self.config, sender_log=self.sender_log)
        child.token_provider = self.token_provider
        return child

    def __init__(
        self,
        pool: str,
        sender_config: dict[str, Any],
        *,
        pool_config: PoolConfig | None = None,
        max_block_ms: int = 60_000,
        memory_block_ms: int | None = None,
        start_sender: bool = True,
        sender_log: str | None = None,
        sender_idle_exit_ms: int | None = None,
        sender_stall_ms: int = SENDER_STALL_MS,
        fast_path: bool = True,
    ) -> None:
        with kafka_errors:
            # pool_config None: create with the defaults, or attach to the pool as it is.
            # Every producer of this process shares its one slot (process_slot.py).
            self.slot = ProcessSlot.join(pool, pool_config)
            self.pool: SharedPool = self.slot.pool
            try:
                self.accumulator = RecordAccumulator(
                    self.pool,
                    max_block_ms=max_block_ms if memory_block_ms is None else memory_block_ms,
                    fast_path=fast_path,
                )
                self._sender_sem = sender_semaphore(pool)  # the Sender's doorbell
            except BaseException:
                self.slot.release(self, 0)
                raise
        try:
            self._setup(sender_config, max_block_ms, start_sender, sender_log,
                        sender_idle_exit_ms, sender_stall_ms)  # fmt: skip
        except BaseException:
            self.accumulator.close()
            if self.pool.created and self.slot.users == 1:  # a pool nobody else uses
                with contextlib.suppress(*SHM_ERRORS):
                    self.pool.unlink_if_unused()
            self.slot.release(self, 0)  # (no slot stays taken by a producer that never was)
            raise

    def _setup(self, sender_config: dict[str, Any], max_block_ms: int, start_sender: bool,
               sender_log: str | None, sender_idle_exit_ms: int | None,
               sender_stall_ms: int) -> None:  # fmt: skip
        self.max_block_ms = max_block_ms
        # a sync pool's send waits this long at most for its commit (views.py): max_block_ms
        # may be 0 (confluent's produce, aiokafka's send), a record's life is bounded by this
        self.durable_wait_ms = int(sender_config.get("delivery_timeout_ms", 120_000))
        self.config: Config | None = None  # (set by open(); tests make clients without one)
        self.sender_log = sender_log
        if sender_idle_exit_ms is None and os.environ.get("SHMKAFKA_SENDER_IDLE_EXIT_MS"):
            sender_idle_exit_ms = int(os.environ["SHMKAFKA_SENDER_IDLE_EXIT_MS"])
        self.supervisor = SenderSupervisor(
            self.pool,
            sender_config,
            log_file=sender_log or os.environ.get("SHMKAFKA_SENDER_LOG"),
            idle_exit_ms=sender_idle_exit_ms,
            stall_ms=sender_stall_ms,
        )
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._handing_over = 0  # done records on their way to on_done (under _lock)
        self._routes: dict[str, tuple[int, tuple[int, ...]]] = {}  # topic → version, deque ids
        # topics asked of the Sender → the refusal count then (see refused())
        self.topics = TopicRequests(self.pool, lambda: self._sender_sem.release())
        self._fast = self.accumulator.fast_path
        self._sync = self.waits_in_send = self.durable_sends  # (views.py)
        # the futures: the C Tracker appends and registers a record in one call
        self._tracker: Any = (
            PyTracker(self._cond, Future) if self._fast is None or Tracker is None
            else Tracker(self._cond, Future, self._on_batch)
        )  # fmt: skip
        self._tracker.on_came_first = self._report_came_first
        self._next_retire = 0.0
        self._next_liveness = 0.0
        self._suspects: set[int] = set()  # registrations unheld at the last liveness check
        # Called (by the completion thread, or by send for a record resolved at once) with
        # the futures just resolved, in offset order per batch.
        self.on_done: Callable[[list[Future]], None] | None = None
        self.on_event = None  # (sender_events.py says what these are)
        # An app's OAUTHBEARER token callback: (token, expiry in wall-clock ms) for the
        # Sender, through the pool's token board (shm/tokens.py).
        self.token_provider: Callable[[], tuple[str, int]] | None = None
        self.connect_error = None
        self.event_logger = sender_logger
        self._segment_inode = os.fstat(self.pool.segment.fd).st_ino
        self._events_seen = self._recent_events_start()
        self._closed = False
        self._serving = False  # the process slot's thread hands us completions (start())
        self._next_check = 0.0  # when housekeeping() next checks the Sender
        self._flushers = 0  # threads waiting in flush(), under self._cond
        self.answer_waiters = 0  # threads waiting for the Sender's answer on the txn board
        self._idle = self._cond
        self.start_sender = start_sender
        if start_sender:  # (retried while a new Sender dies at start: supervisor.py)
            with kafka_errors:
                self.supervisor.start(max_block_ms / 1000 or SENDER_START_BOUND_S)
        # The completion thread starts on first use (start()), never here: a process that
        # makes its producer and then forks (a preforking server's master) must not hold a
        # thread at the fork, which may hold the GIL and leave the children hung.

    @property
    def appends_in_c(self) -> bool:
        """Records are appended and registered in C (a facade's C entry can take them; not
        in a sync pool, whose sends wait for their commit here)."""
        return (self._fast is not None and Tracker is not None
                and isinstance(self._tracker, Tracker) and not self._sync)  # fmt: skip

    def bind_entry(
        self, entry: Any, binding: EntryBinding, guard: tuple[Any, int, int] | None = None
    ) -> bool:
        """Let a facade's C entry (entry.py) append and register the common record through
        this client; False when this client appends or registers in Python (nothing
        bound). ``guard`` (buffer, offset, value) sends every record to the facade's Python
        path once that word of shared memory changes (a fenced transactional producer)."""
        if not self.appends_in_c:
            return False
        if guard is not None:
            entry._fast_guard(*guard)
        entry._fast_enable(
            self._tracker, self._fast, self._routes, binding.size_precheck, binding.partitioner,
            binding.on_delivery, binding.reports, binding.unassigned, binding.max_messages,
        )  # fmt: skip
        return True

    def start(self) -> None:
        """Have the process's completion thread serve us, if not yet (every way in calls
        it; the thread is the process slot's, shared by the process's producers)."""
        if self._serving or self._closed:
            return
        self._serving = True
        self.slot.serve(self)

    # ------------------------------------------------------------------ send

    def partitions_for(self, topic: str) -> int:
        self.start()
        with kafka_errors:
            return self._partitions_for(topic)

    def _partitions_for(self, topic: str) -> int:
        entries = self.pool.directory.partitions(topic)
        if entries is not None:
            return len(entries)
        wait = self.topic_wait(topic, fail_on_connect=True)
        faultpoints.reached("topic.waiting")
        found = wait.wait(wait.began + self.max_block_ms / 1000)
        if found is None:
            raise KafkaTimeoutError(
                f"topic {topic!r} not present in metadata after {self.max_block_ms} ms"
            )
        return found

    def topic_wait(self, topic: str | None, *, fail_on_connect: bool) -> TopicWait:
        """A wait for ``topic``'s metadata (topics.py), asked for now if not known."""
        failure = self.connect_failure if fail_on_connect else None
        return TopicWait(self.topics, topic, self.cluster_reachable, failure)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """The SASL username and password for the pool Sender's next authentication (a new
        connection or a re-authentication), for every producer of the pool: its connections
        are the pool's. Connections already authenticated stay up."""
        self.pool.credentials.post(username, password)

    @overload
    def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None,
        headers: Sequence[HeaderInput] = (), partition: int | None = None,
        timestamp_ms: int | None = None, report: Any = None, want_future: Literal[True] = True,
        verdict: int | None = None,
    ) -> Future: ...  # fmt: skip

    @overload
    def send(
        self, topic: str, value: bytes | None, key: bytes | None,
        headers: Sequence[HeaderInput], partition: int | None, timestamp_ms: int | None,
        report: Any, want_future: bool, verdict: int | None = None,
    ) -> Future | None: ...  # fmt: skip

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Sequence[HeaderInput] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
        report: Any = None,
        want_future: bool = True,
        verdict: int | None = None,
    ) -> Future | None:
        """Append one record; its future (None when ``want_future`` is False: ``report``,
        if not None, is still handed to ``on_done`` once the record is done). ``verdict``:
        the C entry had the record and left it (entry.py's Verdict): one Python path takes
        it, without a second C attempt."""
        if self._closed:
            raise KafkaError("the producer is closed")
        if not self._serving:
            self.start()
        try:
            route = self._routes.get(topic)
            fast = self._fast
            if (
                verdict is None
                and fast is not None
                and route is not None
                and not headers
                and (timestamp_ms is None and not self.pool.forked)
            ):
                if partition is None:
                    partition_arg = -1 if key is not None else self._sticky_for(topic, route)
                else:
                    partition_arg = partition if partition >= 0 else len(route[1])  # → slow path
                hit = self._tracker.send(fast, route, topic, partition_arg, key, value,
                                         report, want_future)  # fmt: skip
                if type(hit) is not int:
                    if self.waits_in_send:
                        self.wait_durable()
                    return hit  # type: ignore[no-any-return]
                verdict = hit
            # a record C left, nothing written: its verdict keeps C's partition while the
            # route C used holds, and this path does not try C again
            chosen, new_batch = (None, False) if verdict is None else verdict_of(verdict)
            future = self._send_slow(topic, value, key, headers, partition, timestamp_ms, report,
                                     want_future, new_batch=new_batch, chosen=chosen,
                                     c_tried=verdict is not None)  # fmt: skip
            if self.waits_in_send:
                self.wait_durable()
            return future
        except SHM_ERRORS as exc:  # (a try costs nothing unless something is raised)
            raise kafka_error(exc) from exc

    def _report_came_first(self, future: Future) -> None:
        """The tracker's hook for a record with a report whose completion was handled before
        its registration: no completion will hand it to ``on_done``, so this does."""
        on_done = self.on_done
        if on_done is not None:
            on_done([future])

    def _on_batch(self, topic: str, flags: int, partition: int) -> None:
        """The C Tracker's hook for a record that filled its batch or opened one the
        Sender must hear of."""
        if flags & WAKE:
            self._wake_sender()
        if flags & FULL:
            self._next_sticky(topic, partition)

    def _sticky_for(self, topic: str, route: tuple[int, tuple[int, ...]]) -> int:
        """The topic's sticky partition, shared by every producer of the pool (recorded in
        the deque of its partition 0); a new random one when there is none yet."""
        deques, count = self.pool.deques, len(route[1])
        sticky = deques.sticky(route[1][0])
        if sticky is None or sticky >= count:
            sticky = random.randrange(count)
            deques.set_sticky(route[1][0], sticky)
        return sticky

    def _next_sticky(self, topic: str, partition: int) -> None:
        """A batch of ``partition`` is full: if it is the sticky one, every producer moves
        to a new one (Java's sticky partitioner, on a new batch)."""
        route = self._routes.get(topic)
        if route is not None and self.pool.deques.sticky(route[1][0]) == partition:
            self.pool.deques.set_sticky(route[1][0], random.randrange(len(route[1])))

    def _send_slow(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[HeaderInput],
        partition: int | None,
        timestamp_ms: int | None,
        report: Any = None,
        want_future: bool = True,
        *,
        new_batch: bool = False,
        chosen: int | None = None,
        c_tried: bool = False,
    ) -> Future | None:
        partition_arg = partition
        timestamp = wall_ms() if timestamp_ms is None else timestamp_ms
        # the partition C chose holds while the directory stays at the route C used
        route_c_used = self._routes.get(topic) if chosen is not None else None
        while True:  # (again when the directory moved under the append: StaleRouteError)
            snapshot = self.pool.directory.snapshot()
            entries = snapshot.topics.get(topic)
            if entries is None:
                self.partitions_for(topic)
                continue
            self._routes[topic] = (snapshot.version, tuple(e.deque_id for e in entries))
            count = len(entries)
            if (
                route_c_used is not None
                and route_c_used[0] == snapshot.version
                and (len(route_c_used[1]) == count)
            ):
                partition = partition_arg if partition_arg is not None else chosen
            elif partition_arg is None:
                if key is not None:
                    partition = murmur2_partition(key, count)
                else:
                    partition = self._sticky_for(topic, self._routes[topic])
            assert partition is not None
            if not 0 <= partition < count:
                raise UnknownTopicOrPartitionError(
                    f"partition {partition} of {topic!r} does not exist ({count} partitions)"
                )
            try:
                result = self.accumulator.append_to(
                    entries[partition].deque_id, timestamp, key, value, headers,
                    now_ms=monotonic_ms(), new_batch=new_batch, version=snapshot.version,
                    c_tried=c_tried,
                )  # fmt: skip
                break
            except StaleRouteError:
                new_batch, route_c_used = False, None
        # The one wake policy, the C append's (_append_write.c): wake the Sender for a full
        # batch, and for a new one only when it would otherwise sleep past linger.ms
        full, new = result.batch_is_full, result.new_batch_created
        wake = full or (new and self._new_batch_needs_wake())
        if full:
            self._next_sticky(topic, partition)  # (if it is the sticky one, as _on_batch)
        facts = (
            (result.batch_id << 32) | result.generation,
            FULL * full + NEW_BATCH * new + WAKE * wake, partition,
            result.offset_delta, timestamp,
            len(key) if key is not None else -1, len(value) if value is not None else -1,
            sum(len(k.encode()) + len(v or b"") for k, v in headers) if headers else -1,
        )  # fmt: skip
        # (the facade's ``report`` goes with the registration, so the completion thread
        # queues it exactly once)
        future = self._tracker.track(topic, facts, report, want_future)  # (on_came_first)
        if wake:
            self._wake_sender()
        return future if want_future else None

    def _new_batch_needs_wake(self) -> bool:
        """A batch opened by the Python path: counted for the Sender, and whether it must be
        woken (the C append's own check, FastAppend.note_new_batch). Without the C append,
        always (Python has no atomic add on shared memory): the one named difference."""
        fast = self._fast
        return True if fast is None else fast.note_new_batch(monotonic_ms())

    def known_route(self, topic: str) -> tuple[int, tuple[int, ...]] | None:
        """The topic's route (directory version, deque ids) as this client last resolved it,
        or None: a send to a topic with a route skips the wait for its metadata."""
        return self._routes.get(topic)

    @property
    def outstanding(self) -> int:
        """Records of this process sent and not yet done."""
        return int(self._tracker.outstanding)

    def undelivered(self) -> int:
        """Records not yet done, and done ones whose futures ``on_done`` has not taken yet
        (a flush that waits for the reports must not see them between the two)."""
        with self._lock:
            return int(self._tracker.outstanding) + self._handing_over

    def _wake_sender(self) -> None:
        wake(self._sender_sem)

    def wake_sender(self) -> None:
        """Ask the Sender to look at the pool now."""
        with kafka_errors:
            self._wake_sender()

    # ------------------------------------------------------------------ completion

    def on_completion(self, completion: Completion) -> None:
        """The process slot's thread: a completion of the process's slot (each producer of
        the process sees them all, and resolves the futures it registered)."""
        if not self._closed:
            self._on_completion(completion)

    def housekeeping(self) -> None:
        """The process slot's thread, once a round: the Sender check, retired waits, the
        pool's events and token questions."""
        if self._closed:
            return
        if self.answer_waiters:  # (the Sender wakes our slot when it answers a txn call)
            with self._cond:
                self._cond.notify_all()
        now = time.monotonic()
        if self.start_sender and now >= self._next_check:
            self._next_check = now + SENDER_CHECK_S
            self.supervisor.check()
        self._retire(now)
        try:
            self.check_liveness(now)
            self._poll_events()
            if self.token_provider is not None:
                self.pool.tokens.answer(self.token_provider)
        except Exception:  # a user's logger, callbacks or a pool error must not end us
            log.exception("in the completion thread's round (liveness, events, tokens)")

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far is done. Meanwhile our slot is flagged as
        flushing, so the Sender sends every batch at once instead of lingering."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.outstanding:
            self.start()
        if self.slot.on_thread():  # from a callback: the results come through us
            with kafka_errors:
                self._flush_on_thread(deadline, timeout)
            return
        with kafka_errors, self._idle:
            if not self.outstanding:
                return
            self._flushers += 1
            if self._flushers == 1:
                self.slot.flushing(True)
            try:
                self._wait_idle(deadline, timeout, None)
            finally:
                self._flushers -= 1
                if not self._flushers:
                    self.slot.flushing(False)

    def _flush_on_thread(self, deadline: float | None, timeout: float | None) -> None:
        self.slot.flushing(True)
        try:
            self._wait_idle(deadline, timeout, self.slot.pump_here)
        finally:
            self.slot.flushing(False)

    def _wait_idle(
        self, deadline: float | None, timeout: float | None, wait: Callable[[float], Any] | None
    ) -> None:
        """Until every record is done; ``wait(seconds)`` waits for results (None: for the
        completion thread's notification)."""
        while self.outstanding:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise KafkaTimeoutError(f"{self.outstanding} records not done in {timeout} s")
            self._wake_sender()
            (wait or self._idle.wait)(min(0.05, remaining) if remaining is not None else 0.05)

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._detach(None)  # (the thread stops within one ring wait; only then unmap)

    def release(self) -> None:
        """Let go of the pool without waiting (a producer object dropped without
        ``close``, from whatever thread collected it): the completion thread ends within
        one ring wait and then detaches, freeing this process's slot. Records stay in the
        pool for the Sender."""
        if self._closed:
            return
        self._closed = True
        # Usually the thread ends (and detaches) within one ring wait; the wait is bounded
        # because the caller may hold a lock the thread needs (a collection can run
        # anywhere).
        self._detach(RELEASE_WAIT_S)

    def _detach(self, wait_s: float | None) -> None:
        if self.pool.forked:
            return  # (the parent's handle: nothing of it is ours to free)
        self.accumulator.close()
        with kafka_errors:
            self.slot.release(self, wait_s)
        self._tracker.clear()
