"""``shmkafka.Producer``: confluent-kafka's ``Producer`` on the shared pool.

Change ``from confluent_kafka import Producer`` to ``from shmkafka import Producer``:
``Producer(conf)`` takes librdkafka's properties, checked as librdkafka does (config.py);
``produce`` never blocks (a ``sync`` pool's: until its record is on the disk); reports and
``error_cb`` are served by ``poll()``/``flush()`` in the calling thread (types.py).

Rules:
- Reports are queued by the completion thread in offset order per batch (so in order per
  partition) and served only from ``poll``/``flush``; an exception raised by a callback
  propagates out of that call, as in confluent-kafka.
- ``produce`` raises ``BufferError`` at once when ``queue.buffering.max.messages`` records are
  pending (counting unserved reports), as librdkafka does; a full pool (librdkafka's queue
  bounds one producer) is waited for up to ``ROOM_WAIT_MS``, in the kernel, first.
- A record for a topic not yet in the pool's directory waits in this process (librdkafka's
  unassigned queue) until the Sender has its metadata, or ``_MSG_TIMED_OUT``. Without
  ``bootstrap.servers`` there is no pool: every record waits there and times out.
- Errors of the pool's Sender (connection, resolution, metadata) reach ``error_cb`` in the
  thread that polls; without one they are logged (to ``logger`` if given).
"""

from __future__ import annotations

import logging
import operator
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from contextlib import nullcontext, suppress
from typing import Any

from shmkafka.facades.confluent import config as confluent_config
from shmkafka.facades.confluent.metadata import (
    ClusterMetadata,
    cluster_metadata,
)
from shmkafka.facades.confluent.records import (
    PARTITIONER_CODES,
    Purged,
    Report,
    Unassigned,
    check_batch,
    check_headers,
    check_value,
    confluent_exception,
    error_of,
    message_for,
    partition_for,
    serve_waiting,
    text_of,
    wait_appended,
)
from shmkafka.facades.confluent.reports import serve_reports
from shmkafka.facades.confluent.stats import statistics
from shmkafka.facades.confluent.transactions import ConfluentTransactions
from shmkafka.facades.confluent.types import KafkaError, KafkaException, Message
from shmkafka.pool.config import Config
from shmkafka.pool.errors import KafkaConfigurationError, KafkaTimeoutError
from shmkafka.producer import entry
from shmkafka.producer.callbacks import call_capturing, weakly
from shmkafka.producer.client import Client
from shmkafka.producer.entry import EntryBinding, ProduceEntry
from shmkafka.producer.futures import Future
from shmkafka.producer.process_slot import awaiting_results
from shmkafka.producer.topics import legal_topic, metadata_poll_s
from shmkafka.producer.transactions import TransactionClient
from shmkafka.producer.views import SenderEvent
from shmkafka.protocol.errors import KafkaError as ProtocolKafkaError
from shmkafka.protocol.records import record_size_bound

log = logging.getLogger("shmkafka.producer")
_LOGGED_IGNORED: set[str] = set()
NO_BOOTSTRAP = (
    "No `bootstrap.servers` configured: client will not be able to connect to Kafka cluster"
)


ROOM_WAIT_MS = 20  # produce()'s wait for room in a full pool (see Rules)


class Producer(ConfluentTransactions, ProduceEntry):
    """confluent-kafka's Producer, its records batched with every other process of the
    pool (``shmkafka.pool`` picks it; default: one per distinct configuration).

    A producer dropped without ``close()`` frees its process slot and completion thread
    when it is collected (its records stay in the pool for the Sender), as confluent-kafka
    frees its handle: the completion thread holds it only weakly."""

    _closed = True  # until __init__ has run (a subclass may skip it)
    _room_wait_ms = ROOM_WAIT_MS  # (0 in a subclass that must never block: an event loop's)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "_settings" in self.__dict__:
            raise RuntimeError("Producer already __init__:ialized")
        conf = confluent_config.conf_from(args, kwargs)
        try:
            s, ignored, warnings = confluent_config.parse(conf)
        except confluent_config.ConfigError as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, str(exc))) from None
        self._settings = s
        self._conf = conf
        self._logger: logging.Logger = s["logger"] or log
        for warning in warnings:
            self._logger.warning("%s", warning)
        fresh = sorted(set(ignored) - _LOGGED_IGNORED)
        if fresh:
            _LOGGED_IGNORED.update(fresh)
            self._logger.info("Producer: accepted, no effect in shmkafka: %s", ", ".join(fresh))
        self._reports: deque[Report | Future] = deque()  # a Future: its own report
        self._errors: deque[KafkaError] = deque()
        self._reports_ready = threading.Condition()
        self._unassigned: deque[Unassigned] = deque()
        # (poll, flush, produce may run in other threads: the topic-less served one at a time)
        self._unassigned_lock = threading.RLock()
        self._closed = False
        self._stats_at = self._created = time.monotonic()
        self._stats = bool(s["statistics_interval_ms"] and s["stats_cb"] is not None)
        # what the short produce path reads, looked up once
        self._partitioner = s["partitioner"]
        self._on_delivery = s["on_delivery"]
        self._max_messages = s["max_messages"]
        self._size_precheck = s["max_request_size"] - 1024  # (headroom for the record's frame)
        self._client = self._open_client(s)
        tid = s["transactional_id"]
        handle = self._client
        self._txn = None if tid is None else TransactionClient(handle, tid)
        if self._client is None and s["error_cb"] is not None:
            self._errors.append(KafkaError(KafkaError._ALL_BROKERS_DOWN, NO_BOOTSTRAP))
        if self._client is not None:
            self._attach(self._client)
            if s["oauth_cb"] is not None:
                self._client.token_provider = confluent_config.oauth_token_provider(
                    s["oauth_cb"], s["oauth_config"]
                )

    def _open_client(self, s: dict[str, Any]) -> Client | None:
        if s["bootstrap_servers"] is None:
            return None  # nothing can be sent: records wait, then time out
        try:
            settings = _settings_of(s, self._room_wait_ms)
        except KafkaConfigurationError as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, text_of(exc))) from None
        try:
            return Client.open(settings, sender_log=s["sender_log"])
        except ProtocolKafkaError as exc:
            raise confluent_exception(exc) from None

    def _attach(self, handle: Client) -> Client:
        handle.on_done = weakly(self._queue_reports)
        if self._settings["logger"] is not None:
            handle.event_logger = self._settings["logger"]
        if self._settings["error_cb"] is not None:
            handle.on_event = weakly(self._queue_error)
        weakref.finalize(self, handle.release)
        if not self._settings["transactional_id"]:
            # one C call for the common produce() (entry.py); a transactional one's in a txn
            self._bind_entry(handle)
        return handle

    def _entry_binding(self) -> EntryBinding:
        return EntryBinding(
            PARTITIONER_CODES.get(self._partitioner, entry.PARTITION_NONE), self._size_precheck,
            self._on_delivery, self._reports, self._unassigned, self._max_messages,
        )  # fmt: skip

    def _entry_client(self) -> Client | None:
        return self._handle

    @property
    def _handle(self) -> Client | None:
        if self._client is None:
            return None
        handle = self._client = self._client.in_this_process()
        if handle.on_done is None:  # re-made after fork
            # new locks too: a thread of the parent (gone here) may have held one at the fork
            self._reports_ready, self._unassigned_lock = threading.Condition(), threading.RLock()
            self._attach(handle)
            self._reports.clear()
            self._unassigned.clear()
        handle.start()  # (on first use in this process, not at construction: see client.py)
        return handle

    def _queue_reports(self, futures: list[Future]) -> None:
        """The completion thread's hook: queue a report per future that asked for one."""
        if self._settings["report_only_errors"]:
            futures = [f for f in futures if not f.succeeded()]
        with self._reports_ready:  # (every future listed has a report)
            self._reports.extend(futures)
            self._reports_ready.notify_all()

    def _queue_error(self, event: SenderEvent) -> None:
        """The completion thread's hook for the Sender's errors: ``error_cb`` gets them."""
        with self._reports_ready:
            self._errors.append(KafkaError(event.code, event.text, fatal=event.fatal))
            self._reports_ready.notify_all()

    def __getstate__(self) -> dict[str, Any]:
        return {"conf": self._conf}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["conf"])  # type: ignore[misc]

    # ------------------------------------------------------------------ produce

    def _produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Callable[..., Any] | None = None,
        callback: Callable[..., Any] | None = None,
        timestamp: int = 0,
        headers: Any = None,
        *,
        verdict: int | None = None,
    ) -> None:
        # The common record (bytes, no headers, no partition or timestamp, a topic the pool
        # knows) takes a short path; anything else, or any doubt, takes the full one.
        # (``verdict``: the C entry tried it and left it, see ``_produce_verdict``.)
        if (headers is None and partition == -1 and not timestamp and type(value) is bytes
                and (key is None or type(key) is bytes) and not self._closed
                and not self._unassigned and self._txn is None):  # fmt: skip
            handle = self._fast_handle
            route = handle.known_route(topic) if handle is not None else None
            if (
                route is not None
                and handle is not None
                and (
                    len(value) + (len(key) if key is not None else 0) < self._size_precheck
                    and handle.outstanding + len(self._reports) < self._max_messages
                )
            ):
                chosen = partition_for(self._partitioner, key, len(route[1]))
                report = callback or on_delivery or self._on_delivery
                if report is not None:  # (else no report: nobody would read it)
                    report = (report, key, value, time.monotonic())
                try:  # (the completion thread queues the report, exactly once)
                    handle.send(topic, value, key, (), chosen, None, report, False, verdict)
                except ProtocolKafkaError as exc:
                    raise confluent_exception(exc) from None
                return
        self._produce_record(topic, value, key, partition, callback or on_delivery, timestamp,
                             headers, verdict)  # fmt: skip

    def _produce_verdict(self, verdict: int, *args: Any, **kwargs: Any) -> None:
        """The record the C entry tried and left, nothing written (``verdict``: what it
        found, entry.py): ``produce``'s Python path, which does not try C again."""
        self._produce(*args, verdict=verdict, **kwargs)

    @property
    def _fast_handle(self) -> Client | None:
        """The handle, if this process's own (not a forked child's first call)."""
        handle = self._client
        if handle is None:
            return None
        return None if handle.forked or handle.on_done is None else handle

    def _produce_record(
        self, topic: Any, value: Any, key: Any, partition: Any, callback: Any, timestamp: Any,
        headers: Any, verdict: int | None = None,
    ) -> None:  # fmt: skip
        if not isinstance(topic, str):
            raise TypeError(f"argument 1 must be str, not {type(topic).__name__}")
        check_value(value)
        check_value(key)
        header_list = check_headers(headers)
        partition, timestamp = operator.index(partition), operator.index(timestamp)
        self._check_open()
        self._check_transactional_produce()
        if len(self) >= self._settings["max_messages"]:
            raise BufferError(KafkaError(KafkaError._QUEUE_FULL).str())
        value_bytes = value.encode() if isinstance(value, str) else value
        key_bytes = key.encode() if isinstance(key, str) else key
        if (
            record_size_bound(key_bytes, value_bytes, header_list)
            > self._settings["max_request_size"]
        ):
            raise KafkaException(KafkaError(
                KafkaError.MSG_SIZE_TOO_LARGE,
                "Unable to produce message: Broker: Message size too large",
            ))  # fmt: skip
        now = time.monotonic()
        report = (callback or self._settings["on_delivery"], key_bytes, value_bytes, now)
        record = Unassigned(topic, value_bytes, key_bytes, header_list, partition, timestamp,
                            report, now + self._settings["delivery_timeout_ms"] / 1000)  # fmt: skip
        if not legal_topic(topic):
            self._fail_now(record, KafkaError(KafkaError.TOPIC_EXCEPTION))  # as a broker would
            return
        try:  # (not a with block: this is the per-record path, and a try costs nothing)
            handle = self._handle
            if handle is None:
                self._unassigned.append(record)
            elif not self._unassigned and self._append(handle, record, verdict):
                return
            else:
                self._queue_behind(handle, record)
            if self._settings.get("pool_durability") == "sync":  # (durable before it returns)
                wait_appended(self._unassigned, record, self._serve_current)
        except ProtocolKafkaError as exc:
            raise confluent_exception(exc) from None

    def _serve_current(self) -> None:  # (the handle as it is now: None until it is open)
        self._serve_unassigned(self._handle)

    def _queue_behind(self, handle: Client, record: Unassigned) -> None:
        with self._unassigned_lock:
            self._serve_unassigned(handle)
            # a record of its topic still waiting goes first, even if the topic became known
            # just after that pass (else this one would overtake it: tests/soak found it)
            behind = any(r.topic == record.topic for r in self._unassigned)
            if behind or not self._append(handle, record):
                if not behind:
                    handle.topics.request(record.topic)
                self._unassigned.append(record)
                if behind:
                    self._serve_unassigned(handle)

    def _append(self, handle: Client, record: Unassigned, verdict: int | None = None) -> bool:
        """Append a record whose topic the pool knows; False if it does not know it yet."""
        entries = handle.partitions(record.topic)
        if entries is None:
            return False
        count = len(entries)
        chosen: int | None = record.partition
        if chosen == -1:
            chosen = partition_for(self._settings["partitioner"], record.key, count)
        elif chosen is not None and not 0 <= chosen < count:
            self._fail_now(record, KafkaError(KafkaError._UNKNOWN_PARTITION))
            return True
        report = record.report if record.report[0] is not None else None
        handle.send(record.topic, record.value, record.key, record.headers, chosen,
                    record.timestamp or None, report, False, verdict)  # fmt: skip
        return True

    def _fail_now(self, record: Unassigned, error: KafkaError) -> None:
        if record.report[0] is not None:
            with self._reports_ready:
                self._reports.append(Report(None, record.report, error, record.topic))

    def _serve_unassigned(self, handle: Client | None) -> None:
        """Append records whose topic is now known; time out those waiting too long."""
        if not self._unassigned:
            return
        with self._unassigned_lock:
            serve_waiting(self._unassigned, handle, self._append, self._fail_now)

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        partition: int = -1,
        callback: Callable[..., Any] | None = None,
        on_delivery: Callable[..., Any] | None = None,
    ) -> int:
        """Produce each message dict (``value``, ``key``, ``callback``) to ``partition``;
        returns how many were queued. As confluent-kafka: every message is checked before
        any is queued; one that fails to queue gets an ``_error`` entry (its KafkaError)
        and no report; per-message ``partition`` is checked but the batch's is used;
        headers are dropped and timestamps are refused."""
        if not isinstance(topic, str):
            raise TypeError(f"argument 1 must be str, not {type(topic).__name__}")
        partition = operator.index(partition)
        if not isinstance(messages, list):
            raise TypeError("messages must be a list")
        if not messages:
            return 0
        self._check_open()
        check_batch(messages)
        default = callback or on_delivery
        queued = 0
        for message in messages:
            try:
                self._produce_record(topic, message.get("value"), message.get("key"),
                                     partition, message.get("callback") or default, 0,
                                     None)  # fmt: skip
            except (KafkaException, BufferError) as exc:
                error = error_of(exc)
                message["_error"] = KafkaError(error.code(), f"Message failed: {error.str()}")
                continue
            queued += 1
        return queued

    # ------------------------------------------------------------------ reports

    def poll(self, timeout: float = -1) -> int:
        """Serve delivery reports and errors (waiting up to ``timeout`` s for one; a
        negative value: until one comes); returns how many were served."""
        self._check_open()
        if timeout == 0 and not (self._reports or self._errors or self._unassigned or self._stats):
            return 0  # (the call after every produce(), as the peer's docs show: nothing due)
        began = time.monotonic()
        deadline = None if timeout < 0 else began + timeout
        while True:
            waiting = len(self._unassigned)
            try:
                self._serve_unassigned(self._handle)
            except ProtocolKafkaError as exc:
                raise confluent_exception(exc) from None
            if waiting and not self._unassigned and deadline is not None:
                break  # (their topics came: a flush() goes back to waiting on the handle)
            # (no one tells of topics: their records look at the directory, often at first)
            step = metadata_poll_s(time.monotonic() - began) if self._unassigned else 0.05
            remaining = step if deadline is None else deadline - time.monotonic()
            waits = remaining > 0 and not self._reports and len(self)  # (woken unheld)
            flag = awaiting_results(None if deadline is None else remaining) if waits else None
            with flag or nullcontext(), self._reports_ready:
                if not (self._reports or self._errors) and remaining > 0:
                    self._reports_ready.wait(min(remaining, step))
                ready = bool(self._reports or self._errors)
            if ready or (deadline is not None and time.monotonic() >= deadline):
                break
        return self._serve()

    def _serve(self) -> int:
        """Call error_cb, stats_cb and the delivery callbacks due. As confluent-kafka, every
        one runs even if one raises; the last exception raised propagates."""
        served = 0
        raised: BaseException | None = None
        while self._errors:
            error = self._errors.popleft()
            served += 1
            callback = self._settings["error_cb"]
            if callback is not None:
                raised = call_capturing(callback, (error,)) or raised
        raised = call_capturing(self._maybe_stats, ()) or raised
        if serve_reports is not None:  # (C: the delivered record's report)
            count, failed = serve_reports(self._reports, Message, self._serve_report)
            served, raised = served + count, failed or raised
        while self._reports:
            try:
                item = self._reports.popleft()
            except IndexError:
                break
            served += 1
            raised = self._serve_report(item) or raised
        if raised is not None:
            raise raised
        return served

    @staticmethod
    def _serve_report(item: Report | Future) -> BaseException | None:
        """Call one report's callback; what it raised."""
        report = item if isinstance(item, Report) else Report(item, item.report, None)
        if report.callback is None:
            return None
        message = message_for(report)
        return call_capturing(report.callback, (message.error(), message))

    def flush(self, timeout: float = -1) -> int:
        """Send everything now and serve reports until none is pending or ``timeout`` s
        passed; returns how many are still pending."""
        self._check_open()
        deadline = None if timeout < 0 else time.monotonic() + timeout
        while len(self):
            handle = self._handle
            if handle is not None:
                try:
                    handle.wake_sender()
                except ProtocolKafkaError as exc:
                    raise confluent_exception(exc) from None
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            step = 0.05 if remaining is None else min(0.05, remaining)
            if handle is not None and not self._unassigned and handle.undelivered():
                # Wait on the handle, which every completion wakes (a record without a callback
                # queues no report for poll), flushing: the Sender sends at once, as librdkafka.
                with suppress(KafkaTimeoutError):
                    handle.flush(step)
                step = 0
            self.poll(step)
        if not len(self):
            self._serve()  # errors and statistics due
        return len(self)

    def __len__(self) -> int:
        if self._closed:
            return 0
        pending = 0
        if self._client is not None:
            handle = self._client
            pending = 0 if handle.forked else handle.undelivered()
        return pending + len(self._reports) + len(self._unassigned)

    def __bool__(self) -> bool:
        return True

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Report this process's pending records as purged: ``_PURGE_QUEUE`` for those not
        sent yet (``in_queue``), ``_PURGE_INFLIGHT`` for those being sent (``in_flight``).
        Records already in the shared pool may still be delivered by the Sender, unreported
        (other processes' records share their batches)."""
        del blocking
        self._check_open()
        if in_queue:
            self._purge_unassigned()
        handle = self._handle
        if handle is None:
            return
        if in_queue:
            handle.fail_pending(Purged(KafkaError._PURGE_QUEUE),
                                select=lambda r: not handle.in_flight(r))  # fmt: skip
        if in_flight:
            handle.fail_pending(Purged(KafkaError._PURGE_INFLIGHT), select=handle.in_flight)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Topics and partition leaders as the pool's Sender last saw them (``topic``: wait
        up to ``timeout`` s for it)."""
        self._check_open("Handle has been closed")
        handle = self._handle
        deadline = time.monotonic() + (300 if timeout is None or timeout < 0 else timeout)
        try:
            wait = None if handle is None else handle.topic_wait(topic, fail_on_connect=False)
            known = wait is not None and wait.wait(deadline) is not None
        except ProtocolKafkaError as exc:
            raise confluent_exception(exc) from None
        if handle is None or not known:
            raise KafkaException(KafkaError(
                KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"
            ))  # fmt: skip
        return cluster_metadata(handle.cluster_view(), topic)

    def cluster_id(self, timeout: float = -1) -> str | None:
        """The cluster id from the brokers' metadata (the pool's Sender records it), waiting
        up to ``timeout`` s (negative: without end) for it; None if it is not known by then."""
        self._check_open("Handle has been closed")
        handle = self._handle
        return None if handle is None else handle.cluster_id(timeout)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """As librdkafka's: the next authentication (a new connection, or a re-authentication)
        uses these; connections up stay up. It sets them for every producer of the pool."""
        self._check_open("Handle has been closed")
        if not isinstance(username, str) or not isinstance(password, str):
            raise TypeError("username and password must be str")
        handle = self._handle
        if handle is None:
            return  # (no bootstrap.servers: no pool, no connection to authenticate)
        try:
            handle.set_sasl_credentials(username, password)
        except ValueError as exc:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, str(exc))) from None

    def close(self, timeout: float = -1) -> bool:
        """Flush, then detach; returns True. As confluent-kafka's, it waits for every record
        (each ends by ``message.timeout.ms``) whatever ``timeout`` says. Later calls to the
        producer raise RuntimeError; a second close returns True."""
        if self._closed:
            return True
        if self._txn is not None:
            self._txn.end_on_close(None if timeout is None or timeout < 0 else timeout)
        try:
            self.flush()
        finally:
            self._closed = True
            self._fast_disable()
            if self._client is not None:
                handle = self._client
                if not handle.forked:
                    handle.fail_pending(Purged(KafkaError._PURGE_QUEUE))
                    handle.close(0)
        return True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, message: str = "Producer has been closed") -> None:
        if self._closed:
            raise RuntimeError(message)

    def _maybe_stats(self) -> None:
        now = time.monotonic()
        if self._stats and now - self._stats_at >= self._settings["statistics_interval_ms"] / 1e3:
            self._stats_at = now
            self._settings["stats_cb"](statistics(self, self._settings))


__all__ = ["Producer"]


def _settings_of(s: dict[str, Any], room_wait_ms: int = ROOM_WAIT_MS) -> Config:
    return Config.build(confluent_config.sender_settings(s), confluent_config.pool_settings(s),
                        s["pool"],
                        max_block_ms=0, memory_block_ms=room_wait_ms)  # fmt: skip


def settings_for(conf: dict[str, Any]) -> Config:
    """The pool and Sender settings ``Producer(conf)`` asks for (a sidecar Sender creates its
    pool with them, so that such producers attach); raises ``KafkaConfigurationError``."""
    try:
        s, _, _ = confluent_config.parse(conf)
    except (confluent_config.ConfigError, TypeError, ValueError) as exc:
        raise KafkaConfigurationError(str(exc)) from None
    return _settings_of(s)
