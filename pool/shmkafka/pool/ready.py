"""``ready()`` and ``drain()``: which nodes have sendable data, and which batches to send.

As the Java client's RecordAccumulator.ready, over the shared accumulator's partition
states. ``ready`` is a pure function of its inputs and ``now_ms``, so tests step a clock;
``Drainer.drain`` writes shared memory (through ``RecordAccumulator.drain``, which seals and
pops the batches it takes).

Rules:
- A partition is sendable when its first batch is full (or more than one batch is queued),
  has waited ``linger.ms`` (``retry.backoff`` for a retry; at most EXHAUSTED_LINGER_MS
  while the BufferPool has waiters), a flush is in progress, or the pool is closing. It
  makes its leader ready unless it is backing off or muted (its in-flight bound, its node,
  its transaction: what it waits for ends the Sender's poll, or comes within MAX_POLL_MS).
  A partition without a known leader names its topic for a metadata refresh.
- A ready node's drain takes its sendable partitions and, after them as room remains,
  those whose first batch has waited half its linger (``HALF_LINGERED``, ``along``): such
  a batch would make a request of its own within linger/2. The price is smaller batches
  (14% more of them in the paced fleet of docs/performance.md). The Java client takes every
  partition of a ready node: with batches that grow, that sends each partition's batch at
  the size it had when another partition's filled, and the batches never grow. A batch
  past half its linger has grown for half its time: it goes at least half its size.
- drain takes at most one batch per partition per request, walks a node's partitions from
  that node's own drain index (so no partition starves), and stops before exceeding
  ``max.request.size`` (of compressed bytes, as estimated) unless nothing has been taken
  yet (one oversized batch still goes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.partition_states import PartitionState

# While processes wait for memory, a batch goes once it has waited this long (or linger.ms,
# if shorter): sending it earlier frees only its unfilled tail (the Sender trims it), and
# makes every batch as small as what arrived since the last round.
EXHAUSTED_LINGER_MS = 5
# A batch that has waited 1/HALF_LINGERED of its linger goes along with its node's ready
# ones: in a paced app (records at a steady rate over many partitions), each partition's
# batch lingers out at its own time, and each made a request of its own: 3.4 batches to a
# request in a fleet of 32 processes over 16 partitions, against 10.5 with this.
HALF_LINGERED = 2


@dataclass(frozen=True)
class ReadyCheckResult:
    ready_nodes: frozenset[int]
    next_ready_check_delay_ms: int
    unknown_leader_topics: frozenset[str]
    sendable: frozenset[int] = frozenset()  # the deques whose first batch may go now
    along: frozenset[int] = frozenset()  # those of them half lingered: after the others


@dataclass(frozen=True)
class ReadyContext:
    """The pool-wide conditions that make every partition sendable."""

    linger_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    exhausted: bool = False
    flushing: bool = False
    closing: bool = False
    # what a batch's bytes shrink to on the wire (CompressionRatio): a request holds
    # max.request.size of compressed batches, as the Java client estimates them
    compression_ratio: float = 1.0


@dataclass
class CompressionRatio:
    """The Java client's CompressionRatioEstimator, pool-wide: an observed ratio above the
    estimate is taken at once (a request must not grow past its limit for long), one
    below it moves the estimate a little (one batch of incompressible data does not make
    every later request small)."""

    estimate: float = 1.0
    IMPROVING_STEP = 0.005
    SAFETY = 1.05  # (the estimate errs on the large side)

    def observe(self, uncompressed: int, compressed: int) -> None:
        if uncompressed <= 0:
            return
        observed = min(1.0, compressed / uncompressed * self.SAFETY)
        if observed > self.estimate:
            self.estimate = observed
        else:
            self.estimate = max(observed, self.estimate - self.IMPROVING_STEP)


def retry_backoff(attempts: int, base_ms: int, max_ms: int) -> int:
    """Exponential backoff before retry number ``attempts`` (1 = first retry)."""
    if attempts <= 0:
        return 0
    return int(min(max_ms, base_ms * 2 ** min(attempts - 1, 30)))


def waited_ms(state: PartitionState, now_ms: int) -> int:
    # A re-enqueued batch records its last attempt in last_append_ms (it takes no appends).
    since = state.last_append_ms if state.attempts > 0 else state.created_ms
    return now_ms - since


def ready(
    states: Iterable[PartitionState],
    known_nodes: Iterable[int],
    ctx: ReadyContext,
    now_ms: int,
    muted: Callable[[PartitionState], bool] = lambda s: False,
) -> ReadyCheckResult:
    nodes = set(known_nodes)
    ready_nodes: set[int] = set()
    unknown: set[str] = set()
    next_check = 2**31 - 1
    sendable_deques: set[int] = set()
    half_lingered: list[PartitionState] = []
    linger = min(ctx.linger_ms, EXHAUSTED_LINGER_MS) if ctx.exhausted else ctx.linger_ms
    for state in states:
        if state.leader < 0 or state.leader not in nodes:
            unknown.add(state.topic)
            continue
        backoff = retry_backoff(state.attempts, ctx.retry_backoff_ms, ctx.retry_backoff_max_ms)
        waited = waited_ms(state, now_ms)
        backing_off = state.attempts > 0 and waited < backoff
        time_to_wait = backoff if state.attempts > 0 else linger
        expired = waited >= time_to_wait
        sendable = state.first_full or expired or ctx.flushing or ctx.closing
        if not sendable or backing_off:
            next_check = min(next_check, max(0, time_to_wait - waited))
            if not backing_off and waited * HALF_LINGERED >= linger:
                half_lingered.append(state)  # (goes along if its node is ready: below)
        elif not muted(state):
            ready_nodes.add(state.leader)
            sendable_deques.add(state.deque_id)
        # (a muted partition waits for an answer or its transaction, not for a time: it does
        # not shorten the Sender's poll, as the Java client's ready() skips it)
    along = frozenset(s.deque_id for s in half_lingered
                      if s.leader in ready_nodes and not muted(s))  # fmt: skip
    return ReadyCheckResult(frozenset(ready_nodes), next_check, frozenset(unknown),
                            frozenset(sendable_deques) | along, along)  # fmt: skip


@dataclass
class Drainer:
    """Keeps a drain index per node between rounds."""

    drain_index: dict[int, int] = field(default_factory=dict)

    def drain(
        self,
        accumulator: RecordAccumulator,
        states: Iterable[PartitionState],
        nodes: Iterable[int],
        max_request_size: int,
        now_ms: int,
        ctx: ReadyContext,
        can_drain: Callable[[PartitionState], bool] = lambda s: True,
        along: frozenset[int] = frozenset(),
    ) -> dict[int, list[DrainedBatch]]:
        """``along``: deques that go only after the others, as room remains."""
        by_node: dict[int, list[PartitionState]] = {}
        for state in states:
            by_node.setdefault(state.leader, []).append(state)
        out: dict[int, list[DrainedBatch]] = {}
        for node in nodes:
            batches = self._drain_node(
                accumulator, by_node.get(node, []), node, max_request_size, now_ms, ctx,
                can_drain, along,
            )  # fmt: skip
            if batches:
                out[node] = batches
        return out

    def _drain_node(
        self,
        accumulator: RecordAccumulator,
        partitions: list[PartitionState],
        node: int,
        max_request_size: int,
        now_ms: int,
        ctx: ReadyContext,
        can_drain: Callable[[PartitionState], bool],
        along: frozenset[int],
    ) -> list[DrainedBatch]:
        if not partitions:
            return []
        ordered = sorted(partitions, key=lambda s: s.deque_id)
        start = self.drain_index.get(node, 0)
        first = next((i for i, s in enumerate(ordered) if s.deque_id >= start), 0)
        rotated = ordered[first:] + ordered[:first]
        if along:  # (the due ones first: one going along never takes a due one's room)
            rotated.sort(key=lambda s: s.deque_id in along)  # (stable: rotation kept)
        taken: list[DrainedBatch] = []
        size = 0
        for state in rotated:
            self.drain_index[node] = state.deque_id  # resume here next time
            if not can_drain(state):
                continue
            backoff = retry_backoff(state.attempts, ctx.retry_backoff_ms, ctx.retry_backoff_max_ms)
            if state.attempts > 0 and waited_ms(state, now_ms) < backoff:
                continue
            if taken and size + int(state.first_size * ctx.compression_ratio) > max_request_size:
                break
            drained = accumulator.drain(
                [state.deque_id], max_request_size - size if taken else 2**62
            )
            if not drained:
                continue
            batch = drained[0]
            taken.append(batch)
            size += int(batch.info.write_pos * ctx.compression_ratio)
            self.drain_index[node] = state.deque_id + 1
        return taken
