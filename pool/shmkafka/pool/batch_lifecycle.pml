/*
 * The batch lifecycle and the delivery of results, as a SPIN model.
 *
 * Checked by tests/pool/test_batch_lifecycle.py in `make test`:
 *     spin -a batch_lifecycle.pml && gcc -o pan pan.c && ./pan -m100000
 * The protocol it models is the code's; a change to one is a change to the
 * other, in the same commit. Each step names its function (file:function).
 *
 * What runs: two app processes (App; they append NREC[i] records to one
 * partition and then flush), their completion threads (Completer), one
 * Sender, which a Killer may SIGKILL once at any step (a new Sender then
 * starts from shared memory alone), over NS slabs (one record per slab) and
 * a completion ring of RING_CAP entries per process.
 *
 * The lifecycle: open -> append -> seal, drain and trim -> in flight ->
 * complete (results posted to each appender's ring, wakes coalesced per
 * response, a full ring holds the batch) -> free -> reuse (generation + 1).
 *
 * Properties (assertions and end states; every interleaving):
 *  P1 every accepted record gets exactly one result (done[r] never exceeds
 *     1; a flush returns only when its records have theirs);
 *  P2 no slab is given out or freed while an appender writes into it;
 *  P3 no waiter sleeps for ever: a flush that cannot return is an invalid
 *     end state;
 *  P4 the liveness check (liveness.py) never fires: a result is never lost
 *     (-DCHECK_MAY_FIRE allows it, to show that it catches a lost one).
 *
 * Switches:
 *  -DOLD_TRACKER  the tracker before the fix: a wait was made with a lookup,
 *                 then an insert, and an allocation in between could run the
 *                 completion thread (a garbage collection running Python code)
 *                 which made its own wait; the insert then replaced it.
 *  -DNO_CHECK     without the liveness check (the old code had none).
 *  -DNO_KILL      no SIGKILL of the Sender.
 *  -DNREC0=2      two records from App 0 (make stress: about 3 minutes).
 *  The old code's model, -DOLD_TRACKER -DNO_CHECK, ends in a hang (P3); with
 *  the check, -DOLD_TRACKER alone violates P4; the code's, no switch, holds.
 *
 * Steps and the code they model:
 *  App: append to the last batch   pool/accumulator.py:append_to,
 *                                  _fastappend.c:append_to_last
 *       memory, then a new batch   pool/bufferpool.py:BufferPool.allocate,
 *                                  accumulator.py:_append_new_batch/_open_batch,
 *                                  pool/batches.py:Batches.open, Deques.push_last
 *       register the record        _tracker.c:register_record/wait_for,
 *                                  producer/futures.py:PyTracker.track
 *       flush                      producer/client.py:Client.flush
 *  Completer: wake, ring, complete producer/process_slot.py:ProcessSlot._loop/deliver,
 *                                  shm/rings.py:CompletionRings.poll,
 *                                  results.py:_on_completion, _tracker.c:Tracker_complete
 *       liveness check             results.py:check_liveness, liveness.py:unheld
 *  Sender: drain and trim          accumulator.py:drain/_trim
 *       request, response, post    sender/sender.py:_finish/_post_pending,
 *                                  accumulator.py:post_completion/defer_wakes,
 *                                  result_wakes.py:ResultWakes (a wake held)
 *       free                       accumulator.py:complete
 *       start after a kill         pool/shared_pool.py:reclaim_unowned,
 *                                  sender/sequences.py:resume_in_flight,
 *                                  shm/locks.py:LockSet._take_over
 *
 * Abstractions (each makes the model more permissive or is argued here):
 *  - A tracker call is one step (GIL_CALL) but for the window of the old
 *    tracker's wait_for. In the code, a call may also run a collection while
 *    it makes the future or packs the outcome; with the wait shared through
 *    PyDict_SetDefault, and held for the call, such a window changes no
 *    outcome (the registration and the completion meet in the one wait).
 *  - The check fails a record unheld at one reading; the code waits for two
 *    readings in a row, so it fires less often than the model's.
 *  - One producer per process; the code hands a polled completion to each
 *    producer of the process from one queue (process_slot.py: deliver).
 * Outside the model, each with its own tests: splitting a batch (its halves
 * name the parent; liveness.py), expiry, corrupt descriptors and transactions
 * (other posts of the same kind, before the free), and the forgetting of a
 * completed wait RETIRE_S after its result (results.py: a registration comes
 * within microseconds of its append; one that came 5 s later would be failed
 * by the check, wrongly: a timing assumption, not a property of the model).
 */

#define NP        2            /* app processes (process slots 0, 1) */
#define NS        2            /* slabs = batch descriptors */
#ifndef NREC0                  /* records of App 0 and of App 1 (-D to change) */
#define NREC0     1
#endif
#ifndef NREC1
#define NREC1     1
#endif
#define NR        (NREC0 + NREC1)
#define RING_CAP  1
#define NO_BATCH  255

#define FREE      0
#define OPEN      1
#define SEALED    2
#define IN_FLIGHT 3

/* ---- shared memory (shm/layout.py) ---- */
byte bstate[NS];               /* B_STATE */
byte bgen[NS];                 /* B_GENERATION */
byte bcount[NS];               /* B_RECORD_COUNT (published last) */
byte brun[NS];                 /* B_SLAB_COUNT */
byte bapp[NS];                 /* APPENDERS: bit per process slot */
bit  used[NS];                 /* FREEMAP */
byte dq[2];                    /* the partition's deque: dq[0] first */
byte dqlen;
bit  stripe;                   /* the deque's stripe lock */
bit  sender_has_stripe;        /* (its holder, for recovery after a kill) */
byte writing[NS];              /* appenders writing into a slab right now */
byte pending_alloc[NP];        /* a run allocated, not yet owned by a batch */
chan ring[NP] = [RING_CAP] of { byte, byte };   /* completion rings */
byte wake[NP];                 /* completion semaphores */
byte held;                     /* the Sender's held wakes, bit per process
                                  (result_wakes.py: the Sender's memory only) */

/* ---- the app processes' trackers (producer/futures.py, _tracker.c) ---- */
byte table[NP * NS * 4];       /* (process, batch, generation % 4) -> its wait:
                                  0 none, else 1 + the wait's epoch (a replaced
                                  wait is another object: the epoch flips) */
bit  wdone[NP * NS * 4 * 2];   /* wait (key, epoch) has its result */
byte rec_wait[NR];             /* the wait a registered record is in */
byte rec_batch[NR], rec_gen[NR];
bit  rec_pending[NR];
byte done[NR];                 /* results a record got */
byte outstanding[NP];
byte internal_errors;

bit  kill;                     /* the Killer's SIGKILL of the Sender */
bit  killed;

/* the deque's last batch takes a record (only the last one of a deque does) */
#define LAST        dq[dqlen - 1]
#define LAST_HAS_ROOM (dqlen > 0 && bstate[LAST] == OPEN && bcount[LAST] < brun[LAST])
#define HELD(r)     (bgen[rec_batch[r]] == rec_gen[r] && bstate[rec_batch[r]] != FREE)
#define QUEUED(b)   ((dqlen > 0 && dq[0] == b) || (dqlen > 1 && dq[1] == b))
#define OWNED(b)    (bstate[b] != FREE || (b == 1 && bstate[0] != FREE && brun[0] == 2) || pending_alloc[0] > 0 || pending_alloc[1] > 0)
/* One call of the tracker runs with the GIL held: one step, but for the
 * window of the old tracker's allocation (OLD_TRACKER) */
#ifdef OLD_TRACKER
#define GIL_CALL
#else
#define GIL_CALL atomic
#endif
#define KEY(p, b, g)  ((p) * NS * 4 + (b) * 4 + ((g) % 4))
#define FIRST_REC(p)  ((p) * NREC0)

/* A record's result (results.py:_on_completion, liveness: check_liveness). */
inline resolve(r) {
    done[r]++;
    assert(done[r] == 1);                                        /* P1 */
    rec_pending[r] = 0;
    outstanding[(r >= NREC0 -> 1 : 0)]--
}

/* futures.py:PyTracker._wait / _tracker.c:wait_for: the wait of (p, b, g),
 * made when there is none. */
inline wait_for(p, b, g, w) {
#ifdef OLD_TRACKER
    w = table[KEY(p, b, g)];
    if
    :: w == 0 ->
        /* the allocation of the new wait: a collection may run other
         * threads here; then PyDict_SetItem replaces what they made */
        atomic {
            w = (table[KEY(p, b, g)] == 1 -> 2 : 1);
            table[KEY(p, b, g)] = w; wdone[KEY(p, b, g) * 2 + w - 1] = 0
        }
    :: else
    fi;
    w = KEY(p, b, g) * 2 + w - 1
#else
    atomic {                               /* PyDict_SetDefault */
        if :: table[KEY(p, b, g)] == 0 -> table[KEY(p, b, g)] = 1 :: else fi;
        w = KEY(p, b, g) * 2
    }
#endif
}

/* A completion of (b, g) in process p: every record pending in its wait
 * is resolved; a second one for a done wait is ignored (a restarted
 * Sender's repeat). _tracker.c:Tracker_complete. */
inline complete(p, b, g, w, r) {
    wait_for(p, b, g, w);
    atomic {
        if
        :: !wdone[w] ->
            wdone[w] = 1;
            r = FIRST_REC(p);
            do
            :: r < FIRST_REC(p) + (p == 0 -> NREC0 : NREC1) ->
                if
                :: rec_pending[r] && rec_wait[r] == w -> resolve(r)
                :: else
                fi;
                r++
            :: else -> break
            od
        :: else
        fi
    }
}

/* process_slot.py:ProcessSlot.deliver: every result in the ring. */
inline deliver(p, b, g, w, r) {
    do
    :: nempty(ring[p]) ->
        GIL_CALL {
            ring[p]?b, g; complete(p, b, g, w, r);
            b = 0; g = 0; w = 0; r = 0              /* (scratch: not state) */
        }
    :: empty(ring[p]) -> break
    od
}

proctype App(byte p) {
    byte n = 0, b, s, g, r, w;
    do
    :: n < (p == 0 -> NREC0 : NREC1) ->
        r = FIRST_REC(p) + n;
appending:
        /* accumulator.py:append_to (_fastappend.c:fast_append) */
        atomic { stripe == 0 -> stripe = 1 }
        if
        :: LAST_HAS_ROOM ->
            b = dq[dqlen - 1];
            s = b + bcount[b];
            writing[s]++;                          /* the record's bytes */
            atomic {                               /* appender bit, publish */
                bapp[b] = bapp[b] | (1 << p);
                bcount[b]++; writing[s]--; g = bgen[b]; stripe = 0
            }
        :: else ->
            /* accumulator.py:_append_new_batch: memory with no lock held */
            stripe = 0;
            atomic {                               /* bufferpool.py:allocate */
                if
                :: !used[0] && !used[1] -> s = 0;
                    if :: pending_alloc[p] = 2 :: pending_alloc[p] = 1 fi
                :: !used[0] && used[1] -> s = 0; pending_alloc[p] = 1
                :: !used[1] -> s = 1; pending_alloc[p] = 1
                fi;
                assert(writing[s] == 0 && (pending_alloc[p] == 1 || writing[s + 1] == 0)); /* P2 */
                used[s] = 1;
                if :: pending_alloc[p] == 2 -> used[s + 1] = 1 :: else fi
            }
            atomic { stripe == 0 -> stripe = 1 }
            if
            :: LAST_HAS_ROOM ->
                /* another process opened one meanwhile: memory goes back */
                atomic {
                    used[s] = 0;
                    if :: pending_alloc[p] == 2 -> used[s + 1] = 0 :: else fi;
                    pending_alloc[p] = 0; stripe = 0
                }
                goto appending
            :: else
            fi;
            /* accumulator.py:_open_batch, batches.py:open */
            writing[s]++;
            atomic {
                b = s; bgen[b]++; g = bgen[b]; brun[b] = pending_alloc[p];
                bcount[b] = 1; bapp[b] = 1 << p; bstate[b] = OPEN;
                dq[dqlen] = b; dqlen++;            /* push: publishes it */
                pending_alloc[p] = 0; writing[s]--; stripe = 0
            }
        fi;
        /* the record is accepted: register it (_tracker.c:register_record;
         * the C path registers in the same call, the GIL held but for the
         * allocations of wait_for) */
        GIL_CALL {
            outstanding[p]++;
            rec_batch[r] = b; rec_gen[r] = g;
            wait_for(p, b, g, w);
            atomic {
                rec_wait[r] = w;
                if
                :: wdone[w] -> done[r]++; assert(done[r] == 1); outstanding[p]--
                :: else -> rec_pending[r] = 1
                fi;
                b = 0; s = 0; g = 0; w = 0; n++
            }
        }
    :: else -> break
    od;
    /* client.py:flush(): returns once every record has its result */
    outstanding[p] == 0
}

/* The process's completion thread (process_slot.py:_loop, client.py:
 * housekeeping and check_liveness). */
proctype Completer(byte p) {
    byte b, g, w, r, unheld, checks = 0;
end:
    do
    :: wake[p] > 0 -> wake[p] = 0; deliver(p, b, g, w, r)
                                          /* rings.wait takes every post */
    :: timeout && nempty(ring[p]) ->
        deliver(p, b, g, w, r)            /* a lost wake: one ring wait */
#ifndef NO_CHECK
    :: (checks < 1 || timeout) && outstanding[p] > 0 ->
        /* liveness.py:unheld: read the holders first (once at any moment,
         * then whenever nothing else can happen: every CHECK_S) */
        atomic {
            checks = 1;
            unheld = 0; r = FIRST_REC(p);
            do
            :: r < FIRST_REC(p) + (p == 0 -> NREC0 : NREC1) ->
                if
                :: rec_pending[r] && !HELD(r) -> unheld = unheld | (1 << r)
                :: else
                fi;
                r++
            :: else -> break
            od;
            r = 0
        }
        deliver(p, b, g, w, r);           /* results posted before a free */
        atomic {                          /* fail what is still waiting */
            r = FIRST_REC(p);
            do
            :: r < FIRST_REC(p) + (p == 0 -> NREC0 : NREC1) ->
                if
                :: rec_pending[r] && (unheld & (1 << r)) ->
                    internal_errors++;
#ifndef CHECK_MAY_FIRE
                    assert(internal_errors == 0);                  /* P4 */
#endif
                    resolve(r)
                :: else
                fi;
                r++
            :: else -> break
            od;
            r = 0; unheld = 0
        }
#endif
    od
}

/* Post a batch's result to every appender (accumulator.py:post_completion);
 * ``left`` keeps the slots whose ring was full (sender.py:_post_pending). */
inline post(b, left, woken, q) {
    q = 0;
    do
    :: q < NP ->
        if
        :: (left & (1 << q)) && nfull(ring[q]) ->
            ring[q]!b, bgen[b]; left = left & ~(1 << q); woken = woken | (1 << q)
        :: (left & (1 << q)) && full(ring[q]) -> skip     /* kept for later */
        :: !(left & (1 << q)) -> skip
        fi;
        q++
    :: else -> break
    od
}

/* accumulator.py:complete: the descriptor FREE, then its slabs (the run as
 * the Sender read it at drain: DrainedBatch.info, never read again). */
inline free_batch(b, slabs) {
    bstate[b] = FREE;
    assert(writing[b] == 0);                                       /* P2 */
    used[b] = 0;
    if :: slabs == 2 -> assert(writing[b + 1] == 0); used[b + 1] = 0 :: else fi
}

proctype Sender() {
    byte b, q, left, woken, slabs;
    byte flight = NO_BATCH;       /* a drained batch (its request in flight) */
start:
    /* sender.py: a new Sender's start (pool.py:reclaim_unowned,
     * sequences.py:resume_in_flight) */
    atomic {
        b = 0;
        do
        :: b < NS ->
            if
            :: (bstate[b] == SEALED || bstate[b] == IN_FLIGHT) && !QUEUED(b) ->
                flight = b; left = bapp[b]; slabs = brun[b]
            :: else
            fi;
            b++
        :: else -> break
        od;
        /* slabs no batch and no allocation owns go back */
        b = 0;
        do
        :: b < NS ->
            if
            :: used[b] && !OWNED(b) -> assert(writing[b] == 0); used[b] = 0
            :: else
            fi;
            b++
        :: else -> break
        od;
        b = 0
    };
    {
end:
    do
    :: flight == NO_BATCH && dqlen > 0 ->
        /* accumulator.py:drain: seal and pop the first batch */
        atomic { stripe == 0 -> stripe = 1; sender_has_stripe = 1 }
        b = dq[0];
        atomic {
            bstate[b] = SEALED; dq[0] = dq[1]; dqlen--;
            flight = b; left = bapp[b]; slabs = brun[b]
        }
        /* accumulator.py:_trim: the descriptor shrinks, then the tail is
         * freed (a kill between leaks it to the next Sender's reclaim) */
        if
        :: brun[b] == 2 && bcount[b] == 1 ->
            brun[b] = 1; slabs = 1;
            assert(writing[b + 1] == 0); used[b + 1] = 0      /* P2 */
        :: else
        fi;
        atomic { sender_has_stripe = 0; stripe = 0; b = 0 }
    :: flight != NO_BATCH && bstate[flight] == SEALED ->
        bstate[flight] = IN_FLIGHT                /* the produce request */
    :: flight != NO_BATCH && bstate[flight] == IN_FLIGHT && left != 0 ->
        /* the response: post (sender.py:_finish), wakes deferred to the
         * end of the round (accumulator.py:defer_wakes), each made or held
         * (result_wakes.py: a process woken less than linger.ms ago) */
        atomic {
            woken = 0;
            post(flight, left, woken, q);
            q = 0;
            do
            :: q < NP ->
                if
                :: woken & (1 << q) ->
                    if
                    :: wake[q]++
                    :: held = held | (1 << q)
                    fi
                :: else
                fi;
                q++
            :: else -> break
            od;
            q = 0; woken = 0
        }
    :: held != 0 ->
        /* result_wakes.py:wake_due, a later round: a held wake is made */
        atomic {
            q = 0;
            do
            :: q < NP && held & (1 << q) -> wake[q]++; held = held & ~(1 << q); break
            :: q < NP && !(held & (1 << q)) -> q++
            :: else -> break
            od;
            q = 0
        }
    :: flight != NO_BATCH && bstate[flight] == IN_FLIGHT && left == 0 ->
        free_batch(flight, slabs);
        flight = NO_BATCH
    od
    } unless { kill && !killed };
    /* SIGKILL: what the process held goes; its lock is recovered by the
     * next holder (locks.py), its local state is lost */
    atomic {
        killed = 1; flight = NO_BATCH; left = 0; held = 0;   /* held wakes lost */
        if :: sender_has_stripe -> sender_has_stripe = 0; stripe = 0 :: else fi
    };
    goto start
}

proctype Killer() {
#ifndef NO_KILL
    if
    :: kill = 1
    :: skip
    fi
#else
    skip
#endif
}

init {
    atomic {
        dq[0] = NO_BATCH; dq[1] = NO_BATCH;
        run App(0); run App(1);
        run Completer(0); run Completer(1);
        run Sender(); run Killer()
    }
}
