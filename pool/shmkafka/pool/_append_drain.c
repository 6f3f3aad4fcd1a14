/*
 * The Sender's drain of one deque, as RecordAccumulator.drain takes a
 * deque's first batch and _trim sizes it (pool/accumulator.py, the
 * reference, and its Python twin): under the deque's stripe lock, taken as
 * LockSet.acquire takes it (_append_locks.c), the first batch is sealed and
 * popped, its partition's run hint set from what it filled, and its run
 * shrunk to the slabs it filled; the caller frees the tail once the stripes
 * are let go. Part of the _append extension (_append_internal.h).
 *
 * Also the Sender's read of the deques every round, before it drains
 * (queued_heads; PartitionStates._queued_heads, pool/partition_states.py, is
 * its Python twin): without locks, a snapshot that the drain checks again.
 *
 * What is not the common case is left to Python, which takes the lock
 * itself: a stripe another process holds (DRAIN_BUSY), and a first batch
 * that names another deque (DRAIN_LEAVE: Python looks whether it is queued
 * there). So both paths leave the same bytes (tests/pool/
 * test_fastpath_twins.py).
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"

/* Results that are not a batch (FastAppend.drain_first's ints). */
#define DRAIN_EMPTY 0   /* nothing queued (or damaged ends: the Sender's sweep) */
#define DRAIN_POPPED 1  /* a first batch neither OPEN nor SEALED, popped */
#define DRAIN_STOP 2    /* the batch would not fit the request: stop draining */
#define DRAIN_BUSY 3    /* the stripe is taken: Python waits for it */
#define DRAIN_LEAVE 4   /* the batch names another deque: Python's case */

typedef struct {
    uint32_t batch_id;
    uint32_t size;        /* its write position: the bytes it adds */
    uint32_t tail_first;  /* the slabs it did not fill, to free */
    uint32_t tail_count;  /* (0: none) */
} Drained;

/* Deques.pop_first: the ends moved past the first batch, in one store. */
static void
pop_first(FastAppend *self, char *deque, uint32_t first, uint32_t last)
{
    uint64_t ends = (uint64_t)(uint32_t)self->no_batch
                    | (uint64_t)(uint32_t)self->no_batch << 32;

    if (first != last) {
        uint32_t next = rd32(batch_at(self, first) + self->b_next);
        ends = (uint64_t)next | (uint64_t)last << 32;
    }
    store_release64(deque + self->d_ends, ends);
}

/* RecordAccumulator._trim for a batch just sealed: the run hint of its
 * partition from the slabs it filled (twice that if it left less than half a
 * slab), and its run shrunk to those slabs, the rest handed back in *out. */
static void
trim(FastAppend *self, char *deque, char *batch, uint32_t batch_id,
     uint32_t write_pos, Drained *out)
{
    Py_ssize_t slab_size = self->slab_size;
    uint32_t slab_count = rd32(batch + self->b_slab_count);
    uint32_t first_slab = rd32(batch + self->b_first_slab);
    Py_ssize_t used = ((Py_ssize_t)write_pos + slab_size - 1) / slab_size;

    if (rd32(batch + self->b_attempts) == 0
        && rd32(batch + self->b_parent) == (uint32_t)self->no_parent)
    {
        Py_ssize_t room = (Py_ssize_t)slab_count * slab_size - write_pos;
        Py_ssize_t hint = room < slab_size / 2 ? 2 * used : used;
        hint = hint < 1 ? 1 : (hint > self->max_run ? self->max_run : hint);
        wr32(deque + self->d_run_hint, (uint32_t)hint);
    }
    out->tail_first = out->tail_count = 0;
    int in_bounds = first_slab == batch_id && slab_count >= 1
                    && slab_count <= (uint32_t)(self->num_slabs - batch_id);
    if (used < 1 || used >= (Py_ssize_t)slab_count || !in_bounds) {
        return;
    }
    /* the descriptor shrinks before the tail is freed (a kill between leaks
     * slabs for the next Sender to reclaim, never shares them) */
    store_release32(batch + self->b_slab_count, (uint32_t)used);
    out->tail_first = first_slab + (uint32_t)used;
    out->tail_count = slab_count - (uint32_t)used;
}

/* The first batch of the deque, sealed and popped, when it fits in `room`
 * bytes (room < 0: it goes whatever its size). Stripe lock held. */
static int
drain_locked(FastAppend *self, Py_ssize_t deque_id, int64_t room,
             Drained *out)
{
    char *deque = ((char *)self->view.buf + self->deques_at
                   + deque_id * self->deque_size);
    uint64_t ends = rd64(deque + self->d_ends);
    uint32_t first = (uint32_t)ends, last = (uint32_t)(ends >> 32);

    if (first >= (uint32_t)self->num_slabs
        || last >= (uint32_t)self->num_slabs)
    {
        return DRAIN_EMPTY;  /* (Deques.first: empty, or damaged) */
    }
    char *batch = batch_at(self, first);
    uint32_t state = rd32(batch + self->b_state);
    uint32_t sealed = (uint32_t)self->sealed_state;
    if (state != (uint32_t)self->open_state && state != sealed) {
        pop_first(self, deque, first, last);  /* damaged: not queued here */
        return DRAIN_POPPED;
    }
    if (rd32(batch + self->b_deque) != (uint32_t)deque_id) {
        return DRAIN_LEAVE;
    }
    uint32_t size = rd32(batch + self->b_write_pos);
    if (room >= 0 && (int64_t)size > room) {
        return DRAIN_STOP;
    }
    store_release32(batch + self->b_state, sealed);
    pop_first(self, deque, first, last);
    out->batch_id = first;
    out->size = size;
    trim(self, deque, batch, first, size, out);
    return APPENDED;
}

/* FastAppend.drain_first(deque_id, room): see _append.pyi. */
PyObject *
FastAppend_drain_first(FastAppend *self, PyObject *const *args,
                       Py_ssize_t nargs)
{
    static const char fname[] = "drain_first";
    Py_ssize_t deque_id;
    int64_t room;

    if (check_open(self, fname) < 0 || check_nargs(fname, nargs, 2) < 0
        || ssize_arg(fname, "deque_id", args[0], &deque_id) < 0
        || int64_arg(fname, "room", args[1], &room) < 0)
    {
        return NULL;
    }
    if (deque_id < 0) {
        PyErr_Format(PyExc_ValueError, "%s(): deque_id %zd < 0", fname,
                     deque_id);
        return NULL;
    }
    Py_ssize_t stripe = deque_id % self->n_sems;
    Py_ssize_t lock = self->first_stripe + stripe;
    int taken = TAKE_LOCK(self, lock, self->sems[stripe], "drain_first");
    if (taken <= 0) {
        return taken < 0 ? NULL : PyLong_FromLong(DRAIN_BUSY);
    }
    Drained out = {0, 0, 0, 0};
    int result = drain_locked(self, deque_id, room, &out);
    drop_lock(self, lock, self->sems[stripe]);
    if (result != APPENDED) {
        return PyLong_FromLong(result);
    }
    return Py_BuildValue("(IIII)", out.batch_id, out.size, out.tail_first,
                         out.tail_count);
}

/* One queued partition's head, as PartitionStates.read wants it: (deque id,
 * first batch id, queued (1, or 2 for two or more), slab count, attempts,
 * write position, record count, created ms, last append ms). */
static PyObject *
head_of(FastAppend *self, Py_ssize_t deque_id, uint32_t first, uint32_t last)
{
    const char *batch = batch_at(self, first);
    PyObject *items[9] = {
        PyLong_FromSsize_t(deque_id),
        PyLong_FromUnsignedLong(first),
        PyLong_FromLong(first == last ? 1 : 2),
        PyLong_FromUnsignedLong(rd32(batch + self->b_slab_count)),
        PyLong_FromUnsignedLong(rd32(batch + self->b_attempts)),
        PyLong_FromUnsignedLong(rd32(batch + self->b_write_pos)),
        PyLong_FromUnsignedLong(rd32(batch + self->b_record_count)),
        PyLong_FromLongLong((int64_t)rd64(batch + self->b_created)),
        PyLong_FromLongLong((int64_t)rd64(batch + self->b_last_append)),
    };
    return tuple_of(&PyTuple_Type, items, 9);
}

/* FastAppend.queued_heads(deques_used): see _append.pyi. Each active deque
 * below deques_used: its ends in one load; empty or damaged ends (an id past
 * the slabs) give no head, and an empty one is named for the caller to take
 * out of the active set (its ends loaded again, as Deques.is_empty does). */
PyObject *
FastAppend_queued_heads(FastAppend *self, PyObject *const *args,
                        Py_ssize_t nargs)
{
    static const char fname[] = "queued_heads";
    Py_ssize_t used;

    if (check_open(self, fname) < 0 || check_nargs(fname, nargs, 1) < 0
        || ssize_arg(fname, "deques_used", args[0], &used) < 0)
    {
        return NULL;
    }
    if (used < 0 || used > self->view.len - self->active_at) {
        PyErr_Format(PyExc_ValueError, "%s(): %zd deques is out of range",
                     fname, used);
        return NULL;
    }
    const unsigned char *active =
        (const unsigned char *)self->view.buf + self->active_at;
    uint32_t num_slabs = (uint32_t)self->num_slabs;
    PyObject *heads = PyList_New(0), *empties = PyList_New(0);

    if (heads == NULL || empties == NULL) {
        goto error;
    }
    for (Py_ssize_t d = 0; d < used; d++) {
        if (!active[d]) {
            continue;
        }
        const char *deque = ((const char *)self->view.buf + self->deques_at
                             + d * self->deque_size);
        uint64_t ends = rd64(deque + self->d_ends);
        uint32_t first = (uint32_t)ends, last = (uint32_t)(ends >> 32);

        if (first < num_slabs && last < num_slabs) {
            if (append_new(heads, head_of(self, d, first, last)) < 0) {
                goto error;
            }
        }
        else if ((uint32_t)rd64(deque + self->d_ends)
                 == (uint32_t)self->no_batch)
        {
            if (append_new(empties, PyLong_FromSsize_t(d)) < 0) {
                goto error;
            }
        }
    }
    PyObject *both[2] = {heads, empties};
    return tuple_of(&PyTuple_Type, both, 2);

error:
    Py_XDECREF(heads);
    Py_XDECREF(empties);
    return NULL;
}
