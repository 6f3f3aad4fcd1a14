"""Completion rings: per process slot, results of finished batches, written by the Sender.

Rules:
- One writer (the Sender) advances ``ring_tail``; one reader (the slot's process) advances
  ``ring_head``. Each side writes only its own index, after the entry (publish last).
- ``post`` returns False when the ring is full: the Sender keeps the batch and posts later.
- A completion's ``error_code`` is Kafka's (0 for success), or one of the local codes below,
  which no broker sends (Kafka's codes are >= -1).
- A reader that finds more than a ring's capacity between head and tail, or a head past
  the tail (damaged indexes), skips to the tail: what they span is not results, and
  reading it could take without bound. A result lost so is failed by the liveness check
  (producer/liveness.py).
- After posting, the Sender releases the slot's completion semaphore (``wake``); the
  process's completion thread waits on it with a timeout, so a missed wake costs at most
  one timeout, never a hang. A wait takes every post made so far, not one: the ring is
  read after it, up to a tail that every post it took had published, so the posts of the
  Sender's rounds that came while the process was not reading cost one wake, not one each.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import NamedTuple

import posix_ipc

from shmkafka.shm import waits
from shmkafka.shm.layout import (
    ALL_DELTAS,
    H_SLOTS_HIGH,
    RING_ENTRY,
    S_RING_HEAD,
    S_RING_TAIL,
    U32,
    U64,
    Layout,
)
from shmkafka.shm.segment import Segment, semaphore_name

log = logging.getLogger("shmkafka.producer")

DELIVERY_TIMEOUT = -100  # delivery.timeout.ms passed before the batch was acknowledged
CORRUPT_DESCRIPTOR = -101  # the batch's descriptor was damaged in shared memory: not sent
SSL_HANDSHAKE_FAILED = -102  # the TLS handshake with the brokers failed: not sent
TXN_ABORTED = -103  # the record's transaction was aborted before the batch was sent


class SenderView(NamedTuple):
    """How the Sender handled a batch, as its completion carries it (for tracing). A
    NamedTuple, as Completion: made for every result an app reads."""

    attempts: int  # produce requests that carried it
    node_id: int  # the broker node of the last one (-1: none)
    queued_ms: int  # from the batch's creation to the last request (-1: not sent)
    request_ms: int  # the last request's round trip (-1: no answer, as with acks=0)


NOT_SENT = SenderView(0, -1, -1, -1)


class Completion(NamedTuple):
    """One batch's result, as a process reads it from its ring. A NamedTuple, not a frozen
    dataclass: a paced process builds several per wake of its completion thread, and a
    frozen dataclass's construction cost about 13k instructions where a tuple's costs a
    tenth (perf/bench_completion_round.py under callgrind)."""

    batch_id: int
    generation: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    error_code: int
    first_delta: int = 0
    last_delta: int = ALL_DELTAS
    view: SenderView | None = None  # the Sender's view of the batch, when it was sent

    def covers(self, offset_delta: int) -> bool:
        return self.first_delta <= offset_delta <= self.last_delta

    def offset_of(self, offset_delta: int) -> int:
        """The offset of the record at ``offset_delta`` (-1 when the broker gave none)."""
        if self.base_offset < 0:
            return -1
        return self.base_offset + offset_delta - self.first_delta


class CompletionRings:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.layout: Layout = segment.layout
        self._sems: dict[int, posix_ipc.Semaphore] = {}

    def close(self) -> None:
        for sem in self._sems.values():
            sem.close()
        self._sems.clear()

    def semaphore(self, slot: int) -> posix_ipc.Semaphore:
        sem = self._sems.get(slot)
        if sem is None:
            name = semaphore_name(self.segment.pool, "w", slot)
            sem = self._sems[slot] = posix_ipc.Semaphore(name, posix_ipc.O_CREAT, 0o600, 0)
        return sem

    def _indexes(self, slot: int) -> tuple[int, int, int]:
        at = self.layout.slot_at(slot)
        buf = self.segment.buf
        return (
            at,
            U64.unpack_from(buf, at + S_RING_HEAD)[0],
            U64.unpack_from(buf, at + S_RING_TAIL)[0],
        )

    def post(self, slot: int, completion: Completion) -> bool:
        """Sender side: append one result; False if the ring is full."""
        return self.post_entry(slot, ring_entry(completion))

    def post_entry(self, slot: int, entry: bytes) -> bool:
        """``post`` of a result packed by ``ring_entry``."""
        at, head, tail = self._indexes(slot)
        if tail - head >= self.layout.ring_capacity:
            return False
        start = self.layout.ring_entry_at(slot, tail)
        self.segment.buf[start : start + RING_ENTRY.size] = entry
        self.segment.store_u64(at + S_RING_TAIL, tail + 1)  # (publish last)
        return True

    def post_to(self, appenders: bytes, entry: bytes) -> tuple[list[int], list[int]]:
        """Sender side: one result (packed by ``ring_entry``) to every process slot of a
        batch's appender set below the slots' high mark, lowest first: the slots posted to
        (to wake) and those whose ring was full. The twin of ``FastAppend.post_result``
        (pool/_append_post.c)."""
        posted: list[int] = []
        full: list[int] = []
        high = min(
            U32.unpack_from(self.segment.buf, H_SLOTS_HIGH)[0], self.layout.config.max_processes
        )
        for slot in appender_slots(appenders):
            if slot >= high:
                break
            (posted if self.post_entry(slot, entry) else full).append(slot)
        return posted, full

    def wake(self, slot: int) -> None:
        self.semaphore(slot).release()

    def poll(self, slot: int) -> list[Completion]:
        """Reader side: take every posted result, oldest first."""
        at, head, tail = self._indexes(slot)
        if head == tail:
            return []
        if not 0 < tail - head <= self.layout.ring_capacity:  # (damaged: see the rules)
            log.error("slot %d's completion ring has damaged indexes (head %d, tail %d): "
                      "skipped; a record whose result is lost fails at the liveness check",
                      slot, head, tail)  # fmt: skip
            self.segment.store_u64(at + S_RING_HEAD, tail)
            return []
        out: list[Completion] = []
        buf, layout, size = self.segment.buf, self.layout, RING_ENTRY.size
        while head < tail:  # (each run of entries that does not wrap, unpacked at once)
            run = min(tail - head, layout.ring_capacity - head % layout.ring_capacity)
            start = layout.ring_entry_at(slot, head)
            out += _completions(RING_ENTRY.iter_unpack(buf[start : start + run * size]))
            head += run
        self.segment.store_u64(at + S_RING_HEAD, tail)
        return out

    def wait(self, slot: int, timeout: float) -> bool:
        """Reader side: wait for a wake, and take the wakes posted since (the rules);
        False on timeout."""
        sem = self.semaphore(slot)
        if not waits.acquire(sem, timeout):
            return False
        try:
            while sem.value > 0:  # (sem_getvalue: no exception for the common case)
                sem.acquire(0)
        except posix_ipc.BusyError:
            pass  # (taken by nobody else: a slot has one reader; never reached)
        return True

    def pending(self, slot: int) -> int:
        _, head, tail = self._indexes(slot)
        return int(tail - head)


def appender_slots(appenders: bytes) -> list[int]:
    """The process slots of a batch's appender set (layout.py's region 7b), lowest first."""
    bits = int.from_bytes(appenders, "little")
    slots = []
    while bits:
        low = bits & -bits
        slots.append(low.bit_length() - 1)
        bits ^= low
    return slots


def ring_entry(completion: Completion) -> bytes:
    """A result as a ring holds it (RING_ENTRY), packed once for every ring it goes to."""
    view = completion.view or NOT_SENT
    return RING_ENTRY.pack(
        completion.batch_id,
        completion.generation,
        completion.base_offset,
        completion.log_append_time,
        completion.log_start_offset,
        completion.error_code,
        min(view.attempts, 0xFFFF),
        completion.first_delta,
        completion.last_delta,
        view.node_id,
        _clamp(view.queued_ms),
        _clamp(view.request_ms),
    )


def _clamp(ms: int) -> int:
    return max(-1, min(ms, 0x7FFFFFFF))


def _completions(entries: Iterator[tuple[int, ...]]) -> list[Completion]:
    """Ring entries as results, in one comprehension (no call per entry: a paced app's
    completion thread reads a few every wake)."""
    # fmt: off
    return [
        _new(Completion, (batch, generation, base, append, start, code, first, last,
                          _new(SenderView, (attempts, node, queued, request)) if attempts
                          else None))
        for batch, generation, base, append, start, code, attempts, first, last, node, queued,
            request in entries
    ]
    # fmt: on


_new = tuple.__new__  # (a NamedTuple made from its fields without its Python __new__)
