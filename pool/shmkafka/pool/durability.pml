/*
 * A durable pool through a power cut, as a SPIN model: what is on the disk
 * when, a cut at every step, and recovery's reading of the pool
 * (pool/durability.py, pool/recovery.py, sender/sender.py).
 *
 * Checked by tests/pool/test_durability_model.py in `make test`:
 *     spin -a durability.pml && gcc -o pan pan.c && ./pan
 * A change to the commit or recovery protocol is a change to this model, in
 * the same commit.
 *
 * The pool: one partition, one batch descriptor at a time, records 1..N.
 *  - The app appends records in order into the OPEN batch (bytes, then the
 *    publish word) and, in sync mode, waits for a commit that started after
 *    its append (Committer.wait_durable); then the record is acknowledged.
 *  - A commit writes the batch's record (write_pos, sequence, state) into the
 *    copy of the two not holding the newest valid one, then syncs. Until the
 *    sync returns, each write it made is pending: a cut keeps it, drops it,
 *    or tears it (a torn commit record fails its CRC: that copy is void).
 *  - The records' bytes are pending the same way; a commit record's CRC over
 *    them checks only if every byte it covers reached the disk.
 *  - The Sender drains the batch: under the commit lock it takes a sequence
 *    and commits, then sends; the broker writes the batch or, having written
 *    that sequence of that producer already, answers DUPLICATE. On the
 *    answer the Sender commits the batch DONE, then frees it; the next batch
 *    may take the same descriptor (its generation + 1).
 *  - A cut can happen at any step (the `cut` process). Then recovery reads the
 *    newest valid copy: a live batch whose bytes check is sent again, under
 *    its old producer and sequence if it had one (the broker drops what it
 *    has), else under a new producer.
 * The broker remembers the last batch of the producer (it keeps five): a
 * resend of an older one is not recognised, and is written again.
 * Run twice: -DNO_CUT, where every run must end with every record
 * acknowledged (no deadlock); and with the cut, whose runs leave the dead
 * host's processes stopped anywhere (pan -E: those are no invalid ends).
 * Properties (checked at the end of every run, cut or not):
 *  D1 every acknowledged record is in the broker's log;
 *  D2 no record is in the broker's log twice.
 * Switches (each breaks a rule, and the model must find it):
 *  -DSEND_BEFORE_COMMIT  the Sender sends before its commit returns
 *  -DONE_COPY            one commit record per batch, written in place
 *  -DACK_EARLY           the app is acknowledged before its commit
 *  -DNO_FALLBACK         recovery reads the newest valid copy only, and drops
 *                        the batch when its records do not check
 * Not modelled: a freed slab's bytes overwritten by the next batch (the
 * records here keep their numbers), which is why a batch goes DONE before it
 * is freed; the tests with cutfs cover it (tests/powercut).
 */

#define N 3             /* records the app sends */
#define NONE 0

/* volatile: the mapping (lost at a cut) */
byte live_pos = 0;      /* records published in the open batch */
byte live_gen = 1;      /* the descriptor's generation */
byte live_seq = NONE;   /* the sequence it took (1-based), NONE before its send */
byte first_rec = 1;     /* the first record of the current batch */
bool live_done = false;
byte acked = 0;         /* records whose send returned (acknowledged) */
byte started = 0;       /* commits_started, commits_done */
byte done = 0;

/* the disk: two commit-record copies; each: valid, gen, pos, seq, done, first */
bool c_valid[2];
byte c_num[2];
byte c_gen[2];
byte c_pos[2];
byte c_seq[2];
bool c_done[2];
byte c_first[2];
byte disk_bytes = 0;    /* records whose bytes are on the disk (a prefix) */
byte pending_bytes = 0; /* records written since the last sync */

/* the broker: each record's copies in the log */
byte logged[N + 1];
byte broker_seq = 0;    /* the last sequence written for the old producer */
bool cut_done = false;
bool locked = false;    /* the commit lock */

inline take() { atomic { !locked -> locked = true } }
inline give() { locked = false }

/* a commit: write the newer record into the other copy, sync. The write and
 * the bytes are durable only once the sync is done; a cut in between keeps,
 * drops or tears them (cut, below, decides). */
inline commit()   /* the caller declares cc, nn */
{
    started++;
    nn = started;
    if
    :: c_valid[0] && (!c_valid[1] || c_num[0] > c_num[1]) -> cc = 1
    :: else -> cc = 0
    fi;
#ifdef ONE_COPY
    cc = 0;
#endif
    atomic {
        pend_valid = true; pend_copy = cc; pend_num = nn; pend_gen = live_gen;
        pend_pos = live_pos; pend_seq = live_seq; pend_done = live_done;
        pend_first = first_rec; pending_bytes = live_pos
    };
    /* the sync returns: the write and the bytes are on the disk */
    atomic {
        !cut_done ->
        c_valid[cc] = true; c_num[cc] = nn; c_gen[cc] = pend_gen; c_pos[cc] = pend_pos;
        c_seq[cc] = pend_seq; c_done[cc] = pend_done; c_first[cc] = pend_first;
        if :: first_rec - 1 + pending_bytes > disk_bytes -> disk_bytes = first_rec - 1 + pending_bytes
           :: else -> skip fi;
        pend_valid = false;
        done = nn
    }
}

/* the commit's writes not yet synced */
bool pend_valid = false;
byte pend_copy, pend_num, pend_gen, pend_pos, pend_seq, pend_first;
bool pend_done;

proctype app()
{
    byte target, cc, nn;
    do
    :: atomic { !cut_done && first_rec - 1 + live_pos < N && live_seq == NONE && !live_done ->
                live_pos++ };   /* bytes, then the publish word */
#ifdef ACK_EARLY
       atomic { if :: !cut_done -> acked = first_rec - 1 + live_pos :: else -> skip fi };
#endif
       target = started + 1;
       do
       :: done >= target -> break
       :: else -> take(); if :: done < target && !cut_done -> commit() :: else -> skip fi; give()
       :: cut_done -> goto stop
       od;
       atomic { if :: !cut_done -> acked = first_rec - 1 + live_pos :: else -> skip fi }
    :: cut_done -> break
    :: first_rec - 1 + live_pos >= N -> break
    od;
stop:
    skip
}

proctype sender()
{
    byte i, cc, nn;
    do
    :: atomic { !cut_done && live_pos > 0 && live_seq == NONE -> skip };
       take();
       if :: cut_done -> give(); break :: else -> skip fi;
       live_seq = first_rec;           /* the batch's first record's number */
#ifndef SEND_BEFORE_COMMIT
       commit();
#endif
       give();
       /* the produce request reaches the broker (or not: a cut may come first) */
       atomic {
           !cut_done ->
           if
           :: broker_seq == live_seq -> skip        /* DUPLICATE: already written */
           :: else ->
               i = first_rec;
               do :: i < first_rec + live_pos -> logged[i]++; i++ :: else -> break od;
               broker_seq = live_seq
           fi
       };
#ifdef SEND_BEFORE_COMMIT
       take(); commit(); give();
#endif
       /* the answer: DONE, then free; the next batch takes the descriptor */
       live_done = true;
       take(); commit(); give();
       atomic {
           !cut_done ->
           first_rec = first_rec + live_pos; live_pos = 0; live_seq = NONE;
           live_done = false; live_gen++
       }
    :: cut_done -> break
    :: first_rec > N -> break
    od
}

/* the power cut, at any step: the pending commit write is kept, dropped or
 * torn; pending bytes are kept or dropped (a prefix) */
proctype cut()
{
    atomic {
        cut_done = true;
        if
        :: pend_valid ->
            if
            :: c_valid[pend_copy] = true; c_num[pend_copy] = pend_num; c_gen[pend_copy] = pend_gen;
               c_pos[pend_copy] = pend_pos; c_seq[pend_copy] = pend_seq;
               c_done[pend_copy] = pend_done; c_first[pend_copy] = pend_first
            :: skip                            /* dropped */
            :: c_valid[pend_copy] = false      /* torn: its CRC fails */
            fi;
            if
            :: disk_bytes = pend_first - 1 + pend_pos
            :: skip
            fi
        :: else -> skip
        fi
    }
}

/* recovery: the newest valid copy; a live batch whose bytes check is sent
 * again, under its old sequence (the broker drops a duplicate) or new */
inline recover()
{
    /* the newest valid copy first; one whose bytes do not check (its commit never
     * finished: the record reached the disk, not all the bytes) gives way to the
     * older copy, whose commit did finish (recovery.py:_chosen) */
    if
    :: c_valid[0] && (!c_valid[1] || c_num[0] > c_num[1]) -> rc = 0
    :: c_valid[1] && (!c_valid[0] || c_num[1] > c_num[0]) -> rc = 1
    :: else -> goto recovered
    fi;
    ri = 0;
#ifdef NO_FALLBACK
    ri = 1;     /* recovery's first version: the newest copy only */
#endif
    do
    :: c_done[rc] -> goto recovered
    :: !c_done[rc] && c_first[rc] - 1 + c_pos[rc] <= disk_bytes -> break  /* the CRC checks */
    :: !c_done[rc] && c_first[rc] - 1 + c_pos[rc] > disk_bytes ->
        ri++;
        if
        :: ri < 2 && c_valid[1 - rc] -> rc = 1 - rc
        :: else -> goto recovered    /* torn: dropped, counted */
        fi
    od;
    if
    :: c_seq[rc] != NONE && broker_seq == c_seq[rc] -> skip      /* DUPLICATE */
    :: else ->  /* new, or older than the broker remembers: written (again) */
        ri = c_first[rc];
        do :: ri < c_first[rc] + c_pos[rc] -> logged[ri]++; ri++ :: else -> break od
    fi;
recovered:
    skip
}

init
{
    byte i, rc, ri;
    atomic { run app(); run sender() };
#ifndef NO_CUT
    run cut();
#endif
    do
    :: cut_done -> recover(); break    /* (what still runs after it touches no disk) */
    :: _nr_pr == 1 && !cut_done -> assert(acked == N); break
    od;
    /* D1, D2 */
    i = 1;
    do
    :: i <= N ->
        assert(logged[i] <= 1);
        if :: i <= acked -> assert(logged[i] == 1) :: else -> skip fi;
        i++
    :: else -> break
    od
}
