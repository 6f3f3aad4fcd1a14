"""Idle topics: retired after ``metadata.max.idle.ms`` without a record, their deques given
back to the pool for the partitions added next (the Java client's metadata.max.idle.ms).

Rules:
- Only the Sender retires (it is the directory's writer and the only drainer). A topic is
  idle once no batch of it was queued for ``max_idle_ms`` (the Sender sees every queued
  batch each round); a topic the Sender has not seen queued since it started counts from
  when it first saw the topic.
- A retirement holds the directory lock, then the stripe locks of the topic's deques in
  ascending order (nothing takes a stripe lock, then the directory lock): no appender can
  push meanwhile, and the directory refuses when a deque holds a batch or one of its
  batches is still in flight (a descriptor that is not FREE).
- A new Sender first repairs what a killed one left (``Directory.recover``).
- When the directory forgot retired topics' sequences (its names or entries ran out), the
  Sender takes a new producer id before it sends again.
- A retired topic leaves the Sender's metadata (no refresh asks for it); an app that sends
  to it again asks for it like a new topic and gets it back with its sequences.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import ExitStack

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.layout import DIRECTORY_LOCK, FREE

log = logging.getLogger("shmkafka.sender")

SWEEP_MS_MAX = 5000  # how often idle topics are looked for, at most
BATCH_WORDS = 32  # a batch descriptor in u32 words (BATCH_SIZE_BYTES / 4)


class IdleTopics:
    def __init__(self, pool: SharedPool, max_idle_ms: int, now_ms: int) -> None:
        with pool.locks.held(DIRECTORY_LOCK):
            if revived := pool.directory.recover():
                log.info("topics a killed Sender was retiring kept their batches: %s", revived)
        self.pool = pool
        self.max_idle_ms = max_idle_ms
        self.sweep_ms = max(1, min(SWEEP_MS_MAX, max_idle_ms // 4))
        self.last_used: dict[str, int] = {}
        self.next_sweep_ms = now_ms + self.sweep_ms
        self.retired = 0  # topics retired so far (statistics, tests)

    def sequences_forgotten(self) -> bool:
        """True once after the directory forgot retired topics' sequences."""
        directory = self.pool.directory
        forgot, directory.forgot = directory.forgot, False
        return forgot

    def used(self, topics: Iterable[str], now_ms: int) -> None:
        """Topics with queued batches this round."""
        last_used = self.last_used
        for topic in topics:
            last_used[topic] = now_ms

    def sweep(self, now_ms: int, forget: Callable[[str], None]) -> list[str]:
        """When due: retire the topics idle for max_idle_ms; ``forget`` drops each from the
        Sender's metadata. Returns the topics retired."""
        if now_ms < self.next_sweep_ms:
            return []
        self.next_sweep_ms = now_ms + self.sweep_ms
        directory = self.pool.directory
        live = set(directory.snapshot().topics)
        for topic in live - self.last_used.keys():
            self.last_used[topic] = now_ms  # (first seen now)
        idle = [t for t in live if now_ms - self.last_used[t] >= self.max_idle_ms]
        for topic in self.last_used.keys() - live:
            del self.last_used[topic]
        if not idle:
            return []
        busy = self._busy_deques()
        retired = [t for t in sorted(idle) if self._retire(t, busy)]
        for topic in retired:
            del self.last_used[topic]
            forget(topic)
        if retired:
            self.retired += len(retired)
            log.info(
                "retired %d topics idle for %d ms (their %d partitions' memory is reused)",
                len(retired), self.max_idle_ms, directory.free_deques(),
            )  # fmt: skip
        return retired

    def _retire(self, topic: str, busy: frozenset[int]) -> bool:
        pool = self.pool
        entries = pool.directory.partitions(topic)
        if not entries:
            return False
        stripes = sorted({pool.layout.stripe_lock(e.deque_id) for e in entries})
        with ExitStack() as held:
            held.enter_context(pool.locks.held(DIRECTORY_LOCK))
            for stripe in stripes:
                held.enter_context(pool.locks.held(stripe))
            return pool.directory.retire(topic, busy)

    def _busy_deques(self) -> frozenset[int]:
        """Deques that a batch descriptor not FREE names (a batch queued, in flight, or
        waiting for its completion to be posted). Read once per sweep: a new batch of a
        deque is pushed under its stripe lock, which a retirement re-checks under."""
        layout = self.pool.layout
        start, count = layout.batches_at, layout.config.num_slabs
        view = self.pool.segment.buf[start : start + count * BATCH_WORDS * 4].cast("I")
        try:
            states = view[0::BATCH_WORDS].tolist()
            deques = view[2::BATCH_WORDS].tolist()
        finally:
            view.release()
        return frozenset(d for s, d in zip(states, deques, strict=True) if s != FREE)
