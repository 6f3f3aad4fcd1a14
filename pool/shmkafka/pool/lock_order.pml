/*
 * The pool's locks, as a SPIN model: the one order (shm/lockdep.py), every
 * path that takes more than one lock, the timed wait, and what follows a
 * timeout.
 *
 * Checked by tests/pool/test_lock_order_model.py in `make test`:
 *     spin -a lock_order.pml && gcc -o pan pan.c && ./pan
 * A change to the lock protocol is a change to this model, in the same
 * commit. Each path names its function (file:function).
 *
 * Locks (their ids are their places in the order; shm/lockdep.py):
 *     SLOT the slot table's kernel lock  (SLOT_TABLE_BYTE)
 *     DIR  the directory writer lock     (pool lock 1)
 *     S0   a stripe lock                 (pool locks 2..: ascending only)
 *     S1   the next stripe lock
 *     POOL the pool lock                 (pool lock 0)
 * The other kernel record locks (Sender, spawn, boards, commit, recovery)
 * are not here: none is held while a pool lock is waited for, but the
 * Sender's (held for its life, outermost) and recovery, a leaf taken by a
 * waiter. The commit lock (a durable pool's, pool/durability.py) is held
 * only around commit records and the msync, and the Sender's encoding of a
 * request, which takes no pool lock; the model of what it guards is
 * durability.pml.
 *
 * Paths (each a process; they run concurrently, once each):
 *  Drain       the Sender's drain: stripe, seal and shrink, let go; then the
 *              pool lock to free the tails   accumulator.py:drain/_trim
 *  Reclaim     a producer attaching (or the Sender) reclaims a dead
 *              process: the slot table for the whole reclaim, the stripe of
 *              its OPEN batch, then the pool lock
 *                                            shared_pool.py:reclaim_dead/_reclaim
 *  Attach      a process claims a slot under the slot table
 *                                            shared_pool.py:SharedPool, slots.py
 *  AppendC     the C append opening a batch: stripe (try), then the pool
 *              lock (try) for a run; busy -> Python's path
 *                                            _append_write.c:fast_append/take_run
 *  AppendPy    Python's new batch: the pool lock (allocate), let go; the
 *              stripe (open); the pool lock again if another process opened
 *              one first (abandon)           accumulator.py:_append_new_batch
 *  Retire      an idle topic goes back: the directory lock, then its stripes
 *              in ascending order            sender/idle.py
 *
 * A wait is timed (shm/locks.py:LockSet._wait): when every process waits,
 * SPIN's `timeout` is the 60 s acquire timeout. The waiter raises
 * LockTimeoutError, and unwinding its `with` blocks lets go of what it held,
 * so the others go on: the model counts the timeout and runs on. Property:
 *  L1 no take goes against the order (lockdep's check, at each take);
 *  L2 no lock wait times out while every holder is alive and running: a
 *     timeout is only for a stopped holder (timeouts == 0 at the end).
 *
 * Switches:
 *  -DOLD_DRAIN    the drain before the fix: it freed the tails holding the
 *                 stripe (stripe, then pool).
 *  -DOLD_RECLAIM  the reclaim before the fix: pool, then the stripe
 *                 (_queued under the pool lock).
 *  -DNO_ORDER     without lockdep's check (L1), to see what the old order
 *                 does: -DOLD_RECLAIM -DNO_ORDER deadlocks until a timeout
 *                 (L2); the code's, no switch, holds both.
 */

#define SLOT 0
#define DIR  1
#define S0   2
#define S1   3
#define POOL 4
#define NLOCKS 5
#define NOBODY 255

byte holder[NLOCKS] = NOBODY;   /* who holds each lock */
byte mine[6];                   /* each process's held locks, a bit per lock id */
byte timeouts = 0;
bool failed[6];                 /* a process whose wait timed out (it raised) */

/* lockdep (shm/lockdep.py:acquiring): nothing held at or after l */
inline check_order(me, l)
{
#ifndef NO_ORDER
    assert((mine[me] >> l) == 0)
#else
    skip
#endif
}

/* LockSet.acquire, and KernelLock.__enter__ for SLOT (the kernel has no timed
 * wait for a record lock: polled to the same timeout): a timed wait. On a
 * timeout the process fails: it lets go of everything (its `with` blocks
 * unwind) and goes to its end. */
inline lock(me, l)
{
    check_order(me, l);
    if
    :: atomic { holder[l] == NOBODY -> holder[l] = me; mine[me] = mine[me] | (1 << l) }
    :: timeout ->
        atomic {
            timeouts++;
            failed[me] = true;
            release_all(me)
        };
        goto end
    fi
}

/* A try-lock (_append_write.c:take_lock spins, then gives up): taken or not */
inline trylock(me, l, taken)
{
    check_order(me, l);
    atomic {
        if
        :: holder[l] == NOBODY -> holder[l] = me; mine[me] = mine[me] | (1 << l); taken = true
        :: else -> taken = false
        fi
    }
}

inline unlock(me, l)
{
    atomic { assert(holder[l] == me); holder[l] = NOBODY; mine[me] = mine[me] & ~(1 << l) }
}

inline release_all(me)
{
    byte i = 0;
    do
    :: i < NLOCKS -> if :: holder[i] == me -> holder[i] = NOBODY :: else -> skip fi; i++
    :: else -> break
    od;
    mine[me] = 0
}

proctype Drain(byte me)
{
    lock(me, S0);
    /* seal, pop, shrink the descriptor */
#ifdef OLD_DRAIN
    lock(me, POOL);     /* BufferPool.trim under the stripe */
    unlock(me, POOL);
    unlock(me, S0);
#else
    unlock(me, S0);
    lock(me, POOL);     /* deallocate_many(tails), after the stripe */
    unlock(me, POOL);
#endif
end:
    skip
}

proctype Reclaim(byte me)
{
    lock(me, SLOT);     /* one reclaimer at a time; no claim meanwhile */
#ifdef OLD_RECLAIM
    lock(me, POOL);
    lock(me, S0);       /* _queued */
    unlock(me, S0);
    unlock(me, POOL);
#else
    lock(me, S0);       /* the stripe of the dead process's OPEN batch */
    lock(me, POOL);     /* _release_pending, the slot's pending record */
    unlock(me, POOL);
    unlock(me, S0);
#endif
    unlock(me, SLOT);   /* (slots.free_held before it) */
end:
    skip
}

proctype Attach(byte me)
{
    lock(me, SLOT);     /* claim_held, the lock semaphores */
    unlock(me, SLOT)
end:
    skip
}

proctype AppendC(byte me)
{
    bool taken;
    trylock(me, S0, taken);
    if
    :: taken ->
        trylock(me, POOL, taken);   /* take_run */
        if
        :: taken -> unlock(me, POOL)
        :: else -> skip             /* NEEDS_NEW_BATCH: Python's path */
        fi;
        unlock(me, S0)
    :: else -> skip                 /* BUSY: Python's path */
    fi
end:
    skip
}

proctype AppendPy(byte me)
{
    lock(me, POOL);     /* BufferPool.allocate */
    unlock(me, POOL);
    lock(me, S0);       /* _open_batch, or another's batch took the record */
    unlock(me, S0);
    lock(me, POOL);     /* BufferPool.abandon */
    unlock(me, POOL);
end:
    skip
}

proctype Retire(byte me)
{
    lock(me, DIR);
    lock(me, S0);
    lock(me, S1);
    unlock(me, S1);
    unlock(me, S0);
    unlock(me, DIR);
end:
    skip
}

init
{
    atomic {
        run Drain(0);
        run Reclaim(1);
        run AppendC(2);
        run AppendPy(3);
        run Retire(4);
        run Attach(5)
    };
    (_nr_pr == 1);
    assert(timeouts == 0)   /* L2 */
}
