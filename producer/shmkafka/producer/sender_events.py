"""The pool's events (shm/events.py) as one producer hears them: the Sender's log lines
and errors, read by the completion thread (client.py's housekeeping).

Rules:
- Each Sender log line is logged once per process to ``shmkafka.sender``; each error goes
  to ``on_event`` if a facade set it (confluent's ``error_cb``), else is logged at ERROR.
  A new producer also hears of errors of the last ``RECENT_EVENTS_S`` seconds.
- A refused login or TLS handshake is kept (``connect_error``) while no broker connection
  of the Sender is up: waiting for metadata cannot succeed then (``connect_failure``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from shmkafka.pool.errors import KafkaConnectionError
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.broker_errors import for_code
from shmkafka.protocol.clock import wall_ms
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.broker_stats import UP
from shmkafka.shm.events import AUTHENTICATION, SSL, Event

RECENT_EVENTS_S = 10.0
sender_logger = logging.getLogger("shmkafka.sender")
# (pool name, segment inode, pid) -> the last event number logged by this process (a pool
# made again under the same name is another segment, whose events count from 1 again)
_events_logged: dict[tuple[str, int, int], int] = {}


class SenderEvents:
    """What Client hears of its pool's events (a base of it: the fields below are
    the client's)."""

    pool: SharedPool
    _segment_inode: int
    _events_seen: int
    # Called by the completion thread with each error event of the pool's Sender.
    on_event: Callable[[Event], None] | None
    # The last refused login or TLS handshake the Sender reported (see connect_failure)
    connect_error: Event | None
    event_logger: logging.Logger

    def _recent_events_start(self) -> int:
        """The event number to read after: before the errors of the last few seconds."""
        events, last = self.pool.events.read_after(0)
        since = wall_ms() - int(RECENT_EVENTS_S * 1000)
        recent = [e.number for e in events if e.is_error and e.wall_ms >= since]
        return recent[0] - 1 if recent else last

    def _poll_events(self) -> None:
        if self.pool.events.published() == self._events_seen:
            return
        events, self._events_seen = self.pool.events.read_after(self._events_seen)
        key = (self.pool.name, self._segment_inode, os.getpid())
        logged = _events_logged.get(key, 0)
        for event in events:
            if event.is_error and event.code in (AUTHENTICATION, SSL):
                self.connect_error = event
            if event.is_error and self.on_event is not None:
                self.on_event(event)
            elif event.number > logged:
                level = logging.ERROR if event.is_error else event.level
                self.event_logger.log(level, "%s", event.text)
        if events:
            _events_logged[key] = max(logged, events[-1].number)

    def cluster_reachable(self) -> bool:
        """A broker connection of the pool's Sender is up (its published counters)."""
        return any(b.state == UP for b in self.pool.brokers.read())

    def connect_failure(self) -> KafkaError | None:
        """The typed error of a refused login or TLS handshake while no broker connection
        of the Sender is up: waiting for metadata cannot succeed, so it fails at once."""
        event = self.connect_error
        if event is None:
            return None
        if self.cluster_reachable():
            self.connect_error = None
            return None
        if event.code == AUTHENTICATION:
            return for_code(ErrorCode.SASL_AUTHENTICATION_FAILED)(event.text)
        return KafkaConnectionError(event.text)
