"""SharedPool: one process's handle on a pool — segment, slot, locks and shared structures.

Rules:
- ``SharedPool.open`` creates the pool if it does not exist (or attaches), claims a process
  slot and reclaims the slots of dead processes. ``detach`` frees the slot and unmaps;
  ``destroy`` also unlinks the segment and semaphores (see segment.py for who may).
- Lock order (shm/lockdep.py): a stripe lock may be held when the pool lock is taken
  (reclaiming a dead process's allocation checks its batch under both), never the reverse.
- A handle belongs to the process that opened it: after a fork the child opens its own.
- A pool is removed only under its slot-table lock (``unlink_if_unused``, ``destroy``,
  cleanup.py), and an attaching process checks that its segment is still the pool's, claims
  its slot and creates the lock semaphores under that lock too: an attach racing a removal
  either keeps the pool (its live slot is seen) or creates nothing, so no semaphore outlives
  its segment.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

from shmkafka.pool import recovery
from shmkafka.pool.batches import Batches, BatchInfo, Deques
from shmkafka.pool.bufferpool import BufferPool, SlabRun
from shmkafka.pool.durability import Committer
from shmkafka.pool.result_wakes import hold_of
from shmkafka.protocol.clock import monotonic_ms
from shmkafka.shm.broker_stats import BrokerTable
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.credentials import CredentialsBoard
from shmkafka.shm.directory import Directory
from shmkafka.shm.errors import ShmError
from shmkafka.shm.events import EventRing
from shmkafka.shm.layout import (
    CLUSTER_ID_MAX,
    FREE,
    H_CLUSTER_ID,
    H_DEQUES_USED,
    H_INTERNAL_ERRORS,
    H_NEW_BATCHES,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    H_RECOVERY_STATS,
    H_SENDER_HEARTBEAT,
    H_SENDER_LINGER,
    H_SENDER_PID,
    H_SENDER_START,
    H_SENDER_WAKE_AT,
    I32,
    I64,
    LOCK,
    NO_SLAB,
    OPEN,
    PENDING,
    POOL_LOCK,
    RECOVERY_STATS,
    S_PENDING,
    U16,
    U32,
    U64,
    Layout,
)
from shmkafka.shm.locks import DEFAULT_TIMEOUT_S, LockSet
from shmkafka.shm.namespaces import refuse_out_of_sight
from shmkafka.shm.procs import is_alive, my_identity
from shmkafka.shm.rings import CompletionRings
from shmkafka.shm.segment import DirectoryOpen, Segment, finish_recovery, open_in_directory
from shmkafka.shm.sender_counters import recorded_sender
from shmkafka.shm.slots import SlotTable
from shmkafka.shm.tokens import TokenBoard
from shmkafka.shm.txn_board import TxnBoard


class _Removed(ShmError):
    """The segment was unlinked while this process attached to it (a private retry)."""


class SharedPool:
    def __init__(self, segment: Segment, created: bool) -> None:
        self.segment = segment
        self.created = created
        self.layout: Layout = segment.layout
        self.config: PoolConfig = segment.layout.config
        self.name = segment.pool
        self.pid, self.started = my_identity()
        self.slots = SlotTable(segment)
        with self.slots.lock():
            if not segment.is_current():
                raise _Removed(self.name)
            self.slot = self.slots.claim_held(self.pid, self.started)
            self.locks = LockSet(segment, self.slot, (self.pid, self.started), self.slots.active)
        self.directory = Directory(segment)
        self.batches = Batches(segment)
        self.deques = Deques(segment)
        self.buffers = BufferPool(segment, self.locks, self.slots, self.slot)
        self.rings = CompletionRings(segment)
        self.events = EventRing(segment)
        self.brokers = BrokerTable(segment)
        self.tokens = TokenBoard(segment)
        self.credentials = CredentialsBoard(segment)
        self.txn = TxnBoard(segment)
        # (a durable pool's commits: durability.py; None for a memory pool)
        self.committer = Committer(segment, self.directory) if self.config.durable else None
        self._closed = False

    @property
    def forked(self) -> bool:
        """This handle came over a fork: it is the parent's. Told by the pid, since some
        servers fork without running Python's at-fork hooks (uWSGI)."""
        return os.getpid() != self.pid

    @staticmethod
    def exists(name: str) -> bool:
        from shmkafka.shm.segment import segment_name

        return os.path.exists("/dev/shm" + segment_name(name))

    @classmethod
    def open(cls, name: str, config: PoolConfig | None = None) -> SharedPool:
        """Create or attach. Without ``config`` the pool must exist; with it, it must match.
        A pool_dir pool left by a host that went down is recovered first (recovery.py)."""
        for _ in range(10):
            if config is not None and config.pool_dir:
                opened = open_in_directory(name, config)
                if opened.recover_from is not None:
                    return cls._recovered(opened, config)
                segment, created = opened.segment, opened.created
            elif config is None:
                segment, created = Segment.attach(name), False
            else:
                segment, created = Segment.create_or_attach(name, config)
            if not created:
                try:
                    refuse_out_of_sight(segment)  # before a slot: attaching reclaims "dead" ones
                except BaseException:
                    segment.close()
                    raise
            try:
                pool = cls(segment, created)
            except _Removed:
                segment.close()  # removed while we attached: attach (or make) the new one
                continue
            except BaseException:
                segment.close()
                raise
            pool.reclaim_dead()
            return pool
        raise ShmError(f"pool {name!r} keeps being removed while attaching")

    @classmethod
    def _recovered(cls, opened: DirectoryOpen, config: PoolConfig) -> SharedPool:
        """Build the new pool of what the old file kept, holding the directory lock, and
        make it durable before the old file goes (a cut meanwhile recovers again)."""
        try:
            assert opened.recover_from is not None
            found = recovery.read_old(opened.recover_from)
            pool = cls(opened.segment, True)
            recovery.rebuild(pool, found, monotonic_ms())
            if pool.committer is not None:
                pool.committer.commit()
            finish_recovery(opened, config)
            return pool
        finally:
            opened.release()

    def unlink_if_unused(self) -> bool:
        """Remove the pool if no other process is attached (the Sender, when it exits idle).
        Checked and done under the slot-table lock, which attaching processes also take."""
        if not self.segment.is_current():
            return True  # our segment was unlinked already; the name is another pool's now
        with self.slots.lock():
            if any(s != self.slot for s in self.slots.live()):
                return False
            from shmkafka.shm.segment import unlink_segment

            unlink_segment(self.name)
            return True

    def check_owner(self) -> None:
        """Raise if this handle came over a fork: the child must open the pool itself."""
        if self.forked:
            raise ShmError(
                f"this handle of pool {self.name!r} belongs to pid {self.pid}; "
                "after fork, open the pool again in the child"
            )

    def detach(self) -> None:
        if self._closed:
            return
        self._closed = True
        if os.getpid() == self.pid:
            self.slots.free(self.slot)
        self.buffers.close()
        self.rings.close()
        self.locks.close()
        self.segment.close()

    def destroy(self) -> None:
        """Remove the pool from the system (under the slot-table lock), and detach."""
        from shmkafka.shm.segment import unlink_segment

        if self._closed:
            unlink_segment(self.name)
        elif self.segment.is_current():  # (else the name is another pool's now: left alone)
            with self.slots.lock():
                unlink_segment(self.name)
        self.detach()

    def __enter__(self) -> SharedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # ------------------------------------------------------------------ recovery

    def reclaim_dead(self, timeout: float = DEFAULT_TIMEOUT_S) -> int:
        """Recover the locks, memory and slot of every dead process; returns how many.
        Under the slot-table lock: one reclaimer at a time, and no slot is claimed anew
        while it is reclaimed (two reclaimers of one dead slot, the second after a new
        process took it, would free the live process's slot and its allocation)."""
        with self.slots.lock():
            dead = self.slots.dead()
            for slot in dead:
                self._reclaim(slot, timeout)
        return len(dead)

    def _reclaim(self, slot: int, timeout: float) -> None:
        buf = self.segment.buf
        for lock in range(self.layout.n_locks):
            if buf[self.layout.intent_at(slot, lock)]:
                with self.locks.held(lock, timeout):
                    buf[self.layout.intent_at(slot, lock)] = 0
        # The dead process's pending record changes no more. Its first slab's batch is
        # checked under the stripe lock of its deque, then the pool lock (the lock order).
        first, count = PENDING.unpack_from(buf, self.layout.slot_at(slot) + S_PENDING)
        stripe = self._stripe_of_open_batch(first)
        held: AbstractContextManager[object] = (
            self.locks.held(stripe, timeout) if stripe >= 0 else nullcontext()
        )
        with held, self.locks.held(POOL_LOCK, timeout):
            if first != NO_SLAB and count:
                self._release_pending(slot, first, count, stripe)
            PENDING.pack_into(buf, self.layout.slot_at(slot) + S_PENDING, NO_SLAB, 0)
            self.buffers.remove_waiter(slot)
            self.buffers._wake_head()
        self.slots.free_held(slot)

    def _stripe_of_open_batch(self, batch_id: int) -> int:
        """The stripe lock of the deque an OPEN batch ``batch_id`` names, or -1."""
        if batch_id >= self.config.num_slabs:
            return -1
        info = self.batches.read(batch_id)
        if info.state != OPEN or info.deque_id >= self.deques_used():
            return -1
        return self.layout.stripe_lock(info.deque_id)

    def _release_pending(self, slot: int, first: int, count: int, stripe: int) -> None:
        """Free what a dead process had allocated and no batch or live allocation owns.
        Its record may be stale (the run was already handed to a batch, even completed and
        reused), so each slab is checked against every owner. Under the pool lock, and
        ``stripe`` (-1: none) of the deque its first slab's batch named when it was read."""
        info = self.batches.read(first)
        if info.state == OPEN and not self._queued(info, stripe):
            # Opened but never queued: nobody can reach it. (A live process opening a batch
            # on these slabs holds the stripe lock held here, and its descriptor is whole
            # once OPEN; so this is the dead process's batch, or one torn by memory damage.)
            self.batches.clear(first)
        owned = self._owned_slabs(exclude_slot=slot)
        for slab in range(first, min(first + count, self.config.num_slabs)):
            if slab not in owned:
                self.buffers._mark(SlabRun(slab, 1), 0)

    def _owned_slabs(self, exclude_slot: int = -1) -> set[int]:
        """Slabs a batch descriptor or a live allocation owns. Under the pool lock. The
        allocations are read first: an appender clears its pending record only after its
        batch's descriptor is whole, so a run is seen in one place or the other."""
        owned: set[int] = set()
        for other_slot, _, _ in self.slots.active():
            if other_slot == exclude_slot:
                continue
            o_first, o_count = PENDING.unpack_from(
                self.segment.buf, self.layout.slot_at(other_slot) + S_PENDING
            )
            if o_first != NO_SLAB:
                owned.update(range(o_first, o_first + o_count))
        for batch_id in range(self.config.num_slabs):
            other = self.batches.read(batch_id)
            if other.state != FREE:
                owned.update(range(other.first_slab, other.first_slab + other.slab_count))
        return owned

    def reclaim_unowned(self, timeout: float = DEFAULT_TIMEOUT_S) -> int:
        """Free the slabs marked used that nothing owns: the tail of a batch a Sender was
        trimming when it was killed (the descriptor shrinks before the tail is freed). Only
        a Sender starting calls it (no other Sender trims meanwhile); returns how many."""
        with self.locks.held(POOL_LOCK, timeout):
            owned = self._owned_slabs()
            used = self.buffers.used_map()
            leaked = [s for s, flag in enumerate(used) if flag and s not in owned]
            for slab in leaked:
                self.buffers._mark(SlabRun(slab, 1), 0)
            if leaked:
                self.buffers._wake_head()
        return len(leaked)

    def _queued(self, info: BatchInfo, stripe: int) -> bool:
        """Whether the OPEN batch ``info`` is in its deque, or may be: True when its deque's
        stripe is not ``stripe``, the one held (it was opened after the first read, by a
        live process that queues it under that stripe)."""
        if info.deque_id >= self.deques_used():
            return False
        if self.layout.stripe_lock(info.deque_id) != stripe:
            return True
        return info.batch_id in self.deques.batch_ids(info.deque_id)

    # ------------------------------------------------------------------ inspection

    def producer_identity(self) -> tuple[int, int]:
        """The idempotent producer id and epoch the Sender stored (-1, -1 before any)."""
        buf = self.segment.buf
        return I64.unpack_from(buf, H_PRODUCER_ID)[0], I32.unpack_from(buf, H_PRODUCER_EPOCH)[0]

    def cluster_id(self) -> str | None:
        """The cluster id the Sender learned from a Metadata response, or None."""
        buf = self.segment.buf
        length = min(U16.unpack_from(buf, H_CLUSTER_ID)[0], CLUSTER_ID_MAX)
        if not length:
            return None
        return bytes(buf[H_CLUSTER_ID + 2 : H_CLUSTER_ID + 2 + length]).decode("utf-8", "replace")

    def set_cluster_id(self, cluster_id: str) -> None:
        """The Sender's: the length goes to 0, then the bytes, then the length (last)."""
        encoded = cluster_id.encode("utf-8")[:CLUSTER_ID_MAX]
        buf = self.segment.buf
        U16.pack_into(buf, H_CLUSTER_ID, 0)
        buf[H_CLUSTER_ID + 2 : H_CLUSTER_ID + 2 + len(encoded)] = encoded
        U16.pack_into(buf, H_CLUSTER_ID, len(encoded))

    def count_internal_errors(self, records: int) -> None:
        """Add ``records`` to the pool's internal errors (layout.py: any process, under the
        pool lock; a rare path, so a lock is cheaper than an atomic in C)."""
        with self.locks.held(POOL_LOCK):
            self.segment.store_u64(H_INTERNAL_ERRORS, internal_errors(self.segment) + records)

    def count_recovered_result(self, records: int, failed: bool) -> None:
        """The Sender: a recovered batch's result (recovery.py), in the recovery stats."""
        index = recovery.FAILED_RECORDS if failed else recovery.DELIVERED_RECORDS
        at = H_RECOVERY_STATS + 8 * index
        self.segment.store_u64(at, self.segment.words[at >> 3] + records)

    def recovery_stats(self) -> tuple[int, ...]:
        """The header's RECOVERY_STATS (recovery.py names them)."""
        return tuple(RECOVERY_STATS.unpack_from(self.segment.buf, H_RECOVERY_STATS))

    def set_producer_identity(self, producer_id: int, epoch: int) -> None:
        self.segment.store_u32(H_PRODUCER_EPOCH, epoch)
        self.segment.store_u64(H_PRODUCER_ID, producer_id)

    def set_sender(self, pid: int, started: int, heartbeat_ms: int) -> None:
        self.segment.store_u64(H_SENDER_START, started)
        self.segment.store_u32(H_SENDER_PID, pid)
        self.segment.store_u64(H_SENDER_HEARTBEAT, heartbeat_ms)

    def set_sender_wake_at(self, wake_at_ms: int) -> None:
        self.segment.store_u64(H_SENDER_WAKE_AT, wake_at_ms)

    def set_sender_linger(self, linger_ms: int) -> None:
        self.segment.store_u64(H_SENDER_LINGER, linger_ms)

    def wake_hold_s(self) -> float:
        """How long the Sender may hold a wake of ours (result_wakes.py): a wait shorter
        than that is no reason to be woken at once."""
        return hold_of(I64.unpack_from(self.segment.buf, H_SENDER_LINGER)[0])

    def new_batches(self) -> int:
        """How many batches the C append path has opened (a change counter, see layout.py)."""
        count: int = U64.unpack_from(self.segment.buf, H_NEW_BATCHES)[0]
        return count

    def sender(self) -> tuple[int, int, int]:
        """(pid, start time, last heartbeat ms) of the Sender recorded in the header."""
        return recorded_sender(self.segment)

    def flag(self, offset: int) -> int:
        value: int = U32.unpack_from(self.segment.buf, offset)[0]
        return value

    def deques_used(self) -> int:
        used: int = self.segment.halfwords[H_DEQUES_USED >> 2]  # (one load)
        return min(used, self.config.max_partitions)

    def check_invariants(self) -> list[str]:
        """Structural checks; an empty list means the pool is consistent. Call it while no
        process is appending (tests call it between phases)."""
        problems: list[str] = []
        used = self.buffers.used_map()
        owner: dict[int, str] = {}

        def own(first: int, count: int, who: str) -> None:
            for s in range(first, first + count):
                if s in owner:
                    problems.append(f"slab {s} owned by {owner[s]} and {who}")
                owner[s] = who

        queued: dict[int, int] = {}
        for deque_id in range(self.deques_used()):
            if (damage := self.deques.problem(deque_id)) is not None:
                problems.append(damage)
            if (
                not self.deques.is_empty(deque_id)
                and not self.segment.buf[self.layout.active_byte_at(deque_id)]
            ):
                problems.append(f"deque {deque_id} holds batches but is not active")
            for batch_id in self.deques.batch_ids(deque_id):
                if batch_id in queued:
                    problems.append(f"batch {batch_id} queued twice")
                queued[batch_id] = deque_id
        for batch_id in range(self.config.num_slabs):
            info = self.batches.read(batch_id)
            if info.state == FREE:
                continue
            own(info.first_slab, info.slab_count, f"batch {batch_id}")
            if info.state == OPEN and queued.get(batch_id) != info.deque_id:
                problems.append(f"open batch {batch_id} is not in its deque {info.deque_id}")
            capacity = self.batches.capacity(info.slab_count)
            if info.write_pos > capacity:
                problems.append(f"batch {batch_id} write_pos {info.write_pos} > {capacity}")
        for batch_id, deque_id in queued.items():
            if self.batches.state(batch_id) == FREE:
                problems.append(f"deque {deque_id} holds free batch {batch_id}")
        for slot, pid, started in self.slots.active():
            first, count = PENDING.unpack_from(
                self.segment.buf, self.layout.slot_at(slot) + S_PENDING
            )
            if first != NO_SLAB and count and self.batches.state(first) == FREE:
                own(first, count, f"pending allocation of slot {slot}")
            if not is_alive(pid, started):
                problems.append(f"slot {slot} belongs to dead pid {pid}")
        for s, flag in enumerate(used):
            if flag and s not in owner:
                problems.append(f"slab {s} is used but owned by nothing")
            if not flag and s in owner:
                problems.append(f"slab {s} is free but owned by {owner[s]}")
        for lock in range(self.layout.n_locks):
            _, pid, started = LOCK.unpack_from(self.segment.buf, self.layout.lock_at(lock))
            if pid and not is_alive(pid, started):
                problems.append(f"lock {lock} is held by dead pid {pid}")
        return problems


def internal_errors(segment: Segment) -> int:
    """Records failed by their own process because no result could come any more (their
    batch no longer held them): each is a bug of shmkafka to find (liveness.py)."""
    count: int = segment.words[H_INTERNAL_ERRORS >> 3]
    return count
