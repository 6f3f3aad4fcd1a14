/*
 * The append fast path in C: lock the partition's stripe, append one framed
 * record to the last OPEN batch of its deque, publish, unlock -- the same
 * steps, in the same order, as RecordAccumulator._try_append under
 * LockSet.acquire/release (its Python twin: pool/accumulator.py, and
 * shm/locks.py), which stay the reference and the fallback. The other C
 * parts call it through the capsule _append.h describes.
 *
 * Rules (as in locks.py and layout.py):
 * - The intent byte is set before the semaphore is taken and cleared after
 *   it is posted. If this process already shows intent for the stripe
 *   (another of its threads holds or wants it), or the semaphore is taken,
 *   we return None and Python takes the slow path.
 * - The record bytes are written before the publish fields (write_pos,
 *   record_count, max_timestamp, last_append_ms), which are written last.
 * - Every offset comes from layout.py through the constructor
 *   (fastpath.fast_path_offsets; the keys are listed in layout_fields): nothing
 *   here hard-codes the memory map, not even a field's place in its struct.
 *   The GIL is held throughout, so no other thread of this process
 *   interleaves.
 *
 * The style is CPython's (PEP 7).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <limits.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "_append.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the pool layout is little-endian; use the pure-Python path here"
#endif

/* Tries at a taken lock before the slow path takes over. */
#define SPIN_TRIES 200

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct FastAppend {
    PyObject_HEAD
    Py_buffer view;
    int has_view;           /* 0 before __init__ and after close() */
    int initialized;        /* __init__ succeeded: it may not run again */
    sem_t **sems;           /* the stripe locks' semaphores */
    Py_ssize_t n_sems;
    sem_t *pool_sem;        /* the pool lock's (opening a batch) */
    /* The memory map, fastpath.fast_path_offsets: see layout_fields. */
    /* header */
    Py_ssize_t directory_version_at, sender_wake_at, sender_linger_at;
    Py_ssize_t new_batches_at, waitq_head_at, waitq_tail_at, alloc_cursor_at;
    /* locks: the owner records, and our slot's intent bytes */
    Py_ssize_t locks_at, lock_stride;
    Py_ssize_t lock_owner_slot, lock_owner_pid, lock_owner_start;
    Py_ssize_t pool_lock, first_stripe, intent_at0;
    /* our slot's pending allocation */
    Py_ssize_t pending_first_at, pending_count_at, no_slab;
    /* deques */
    Py_ssize_t deques_at, deque_size;
    Py_ssize_t d_ends, no_batch, active_at, b_next, d_sticky, d_run_hint;
    /* batch descriptors */
    Py_ssize_t batches_at, batch_stride;
    Py_ssize_t b_state, b_generation, b_deque, b_first_slab, b_slab_count;
    Py_ssize_t b_attempts, b_publish, b_write_pos, b_record_count;
    Py_ssize_t b_max_ts, b_last_append, b_base_ts, b_created;
    Py_ssize_t b_producer_id, b_producer_epoch, b_base_sequence;
    Py_ssize_t appenders_at, appenders_size;
    Py_ssize_t b_parent, b_parent_generation, b_parent_delta;
    Py_ssize_t no_parent, open_state;
    /* free map and slabs */
    Py_ssize_t freemap_at, num_slabs, slabs_at, slab_size;
    /* a batch grows to max_run slabs and batch_max_records records (0: any) */
    Py_ssize_t max_run, batch_max_records;
    /* Not the map: the record batch header a batch reserves, and us. */
    Py_ssize_t record_batch_header;
    int32_t slot, pid;
    int64_t started;
} FastAppend;

/*
 * The memory map's keys, each with the field it fills: exactly the keys of
 * fastpath.fast_path_offsets (FastAppend.offsets() returns them, and
 * tests/shm/test_layout_offsets.py compares both sides).
 */
typedef struct {
    const char *key;
    size_t field;           /* offsetof(FastAppend, ...) */
} LayoutField;

#define LAYOUT_FIELD(name) {#name, offsetof(FastAppend, name)}

static const LayoutField layout_fields[] = {
    LAYOUT_FIELD(directory_version_at),
    LAYOUT_FIELD(sender_wake_at),
    LAYOUT_FIELD(sender_linger_at),
    LAYOUT_FIELD(new_batches_at),
    LAYOUT_FIELD(waitq_head_at),
    LAYOUT_FIELD(waitq_tail_at),
    LAYOUT_FIELD(alloc_cursor_at),
    LAYOUT_FIELD(locks_at),
    LAYOUT_FIELD(lock_stride),
    LAYOUT_FIELD(lock_owner_slot),
    LAYOUT_FIELD(lock_owner_pid),
    LAYOUT_FIELD(lock_owner_start),
    LAYOUT_FIELD(pool_lock),
    LAYOUT_FIELD(first_stripe),
    LAYOUT_FIELD(intent_at0),
    LAYOUT_FIELD(pending_first_at),
    LAYOUT_FIELD(pending_count_at),
    LAYOUT_FIELD(no_slab),
    LAYOUT_FIELD(deques_at),
    LAYOUT_FIELD(deque_size),
    LAYOUT_FIELD(d_ends),
    LAYOUT_FIELD(no_batch),
    LAYOUT_FIELD(active_at),
    LAYOUT_FIELD(b_next),
    LAYOUT_FIELD(d_sticky),
    LAYOUT_FIELD(d_run_hint),
    LAYOUT_FIELD(batches_at),
    LAYOUT_FIELD(batch_stride),
    LAYOUT_FIELD(b_state),
    LAYOUT_FIELD(b_generation),
    LAYOUT_FIELD(b_deque),
    LAYOUT_FIELD(b_first_slab),
    LAYOUT_FIELD(b_slab_count),
    LAYOUT_FIELD(b_attempts),
    LAYOUT_FIELD(b_publish),
    LAYOUT_FIELD(b_write_pos),
    LAYOUT_FIELD(b_record_count),
    LAYOUT_FIELD(b_max_ts),
    LAYOUT_FIELD(b_last_append),
    LAYOUT_FIELD(b_base_ts),
    LAYOUT_FIELD(b_created),
    LAYOUT_FIELD(b_producer_id),
    LAYOUT_FIELD(b_producer_epoch),
    LAYOUT_FIELD(b_base_sequence),
    LAYOUT_FIELD(appenders_at),
    LAYOUT_FIELD(appenders_size),
    LAYOUT_FIELD(b_parent),
    LAYOUT_FIELD(b_parent_generation),
    LAYOUT_FIELD(b_parent_delta),
    LAYOUT_FIELD(no_parent),
    LAYOUT_FIELD(open_state),
    LAYOUT_FIELD(freemap_at),
    LAYOUT_FIELD(num_slabs),
    LAYOUT_FIELD(slabs_at),
    LAYOUT_FIELD(slab_size),
    LAYOUT_FIELD(max_run),
    LAYOUT_FIELD(batch_max_records),
};

#define N_LAYOUT_FIELDS Py_ARRAY_LENGTH(layout_fields)

static inline Py_ssize_t *
layout_field(FastAppend *self, size_t i)
{
    return (Py_ssize_t *)((char *)self + layout_fields[i].field);
}

/* Loads and stores of the segment's fields (little-endian, unaligned). */
static inline uint32_t
rd32(const char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t
rd64(const char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void
wr32(char *p, uint32_t v)
{
    memcpy(p, &v, sizeof(v));
}

static inline void
wr64(char *p, uint64_t v)
{
    memcpy(p, &v, sizeof(v));
}

/* One store, ordered after every earlier store (the compiler may not sink
 * those past it): what a publish needs when the writer can be killed between
 * any two instructions. */
static inline void
store_release32(char *p, uint32_t v)
{
    __atomic_store_n((uint32_t *)(void *)p, v, __ATOMIC_RELEASE);
}

static inline void
store_release64(char *p, uint64_t v)
{
    __atomic_store_n((uint64_t *)(void *)p, v, __ATOMIC_RELEASE);
}

/* Zigzag varint of a signed 64-bit value; returns bytes written (at most
 * 10). */
static inline int
put_varlong(unsigned char *out, int64_t n)
{
    uint64_t u = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    int i = 0;

    while (u >= 0x80) {
        out[i++] = (unsigned char)(u | 0x80);
        u >>= 7;
    }
    out[i++] = (unsigned char)u;
    return i;
}

/* ------------------------------------------------------------------------
 * Argument errors, worded as CPython words them.
 */

static int
check_nargs(const char *fname, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs == expected) {
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "%s() takes exactly %zd arguments (%zd given)",
                 fname, expected, nargs);
    return -1;
}

static void
bad_argument(const char *fname, const char *name, const char *expected,
             PyObject *arg)
{
    PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be %s, not %.50s",
                 fname, name, expected, Py_TYPE(arg)->tp_name);
}

/* An int argument that must fit a Py_ssize_t. */
static inline int
ssize_arg(const char *fname, const char *name, PyObject *arg,
          Py_ssize_t *out)
{
    if (!PyLong_Check(arg)) {
        bad_argument(fname, name, "int", arg);
        return -1;
    }
    *out = PyLong_AsSsize_t(arg);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* An int argument (or any object with __index__) that must fit 64 bits. */
static inline int
int64_arg(const char *fname, const char *name, PyObject *arg, int64_t *out)
{
    if (!PyLong_Check(arg) && !PyIndex_Check(arg)) {
        bad_argument(fname, name, "int", arg);
        return -1;
    }
    *out = PyLong_AsLongLong(arg);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static inline int
check_open(FastAppend *self, const char *fname)
{
    if (self->has_view) {
        return 0;
    }
    PyErr_Format(PyExc_ValueError,
                 self->initialized ? "%s() on a closed FastAppend"
                                   : "%s() on an uninitialized FastAppend",
                 fname);
    return -1;
}

/* ------------------------------------------------------------------------
 * Construction and release.
 */

static void
FastAppend_release(FastAppend *self)
{
    if (self->pool_sem != NULL) {
        sem_close(self->pool_sem);
        self->pool_sem = NULL;
    }
    if (self->sems != NULL) {
        for (Py_ssize_t i = 0; i < self->n_sems; i++) {
            if (self->sems[i] != NULL && self->sems[i] != SEM_FAILED) {
                sem_close(self->sems[i]);
            }
        }
        PyMem_Free(self->sems);
        self->sems = NULL;
        self->n_sems = 0;
    }
    if (self->has_view) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
    }
}

static void
FastAppend_dealloc(FastAppend *self)
{
    FastAppend_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* layout[key], a non-negative int that fits a Py_ssize_t. */
static int
layout_value(PyObject *layout, const char *key, Py_ssize_t *out)
{
    PyObject *value = PyDict_GetItemString(layout, key);

    if (value == NULL) {
        PyErr_Format(PyExc_KeyError,
                     "FastAppend() argument 'layout' has no key '%s'", key);
        return -1;
    }
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError,
                     "FastAppend() argument 'layout': '%s' must be int, "
                     "not %.50s", key, Py_TYPE(value)->tp_name);
        return -1;
    }
    *out = PyLong_AsSsize_t(value);
    if (*out == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (*out < 0) {
        PyErr_Format(PyExc_ValueError,
                     "FastAppend() argument 'layout': '%s' must not be "
                     "negative", key);
        return -1;
    }
    return 0;
}

/* The memory map and this process's identity, checked against what the
 * code below assumes of them. */
static int
read_layout(FastAppend *self, PyObject *layout)
{
    Py_ssize_t slot, pid, started;

    for (size_t i = 0; i < N_LAYOUT_FIELDS; i++) {
        if (layout_value(layout, layout_fields[i].key,
                         layout_field(self, i)) < 0)
        {
            return -1;
        }
    }
    if (layout_value(layout, "slot", &slot) < 0
        || layout_value(layout, "pid", &pid) < 0
        || layout_value(layout, "started", &started) < 0
        || layout_value(layout, "record_batch_header",
                        &self->record_batch_header) < 0)
    {
        return -1;
    }
    /* The publish word is stored whole as write_pos | record_count << 32, and
     * a deque's ends as first | last << 32. */
    if (self->no_batch != (Py_ssize_t)UINT32_MAX
        || self->b_write_pos != self->b_publish
        || self->b_record_count
           != self->b_publish + (Py_ssize_t)sizeof(uint32_t))
    {
        PyErr_SetString(PyExc_ValueError,
                        "FastAppend() argument 'layout': the empty batch id "
                        "must be 0xFFFFFFFF and the publish word "
                        "write_pos | record_count << 32");
        return -1;
    }
    if (slot >= self->appenders_size * CHAR_BIT) {
        PyErr_SetString(PyExc_ValueError,
                        "FastAppend() argument 'layout': "
                        "a slot outside the appenders set");
        return -1;
    }
    self->slot = (int32_t)slot;
    self->pid = (int32_t)pid;
    self->started = (int64_t)started;
    return 0;
}

/* A semaphore's name: a str without NUL characters. */
static const char *
semaphore_name(const char *argname, PyObject *name)
{
    Py_ssize_t size;
    const char *utf8;

    if (!PyUnicode_Check(name)) {
        bad_argument("FastAppend", argname, "str", name);
        return NULL;
    }
    utf8 = PyUnicode_AsUTF8AndSize(name, &size);
    if (utf8 != NULL && strlen(utf8) != (size_t)size) {
        PyErr_SetString(PyExc_ValueError, "embedded null character");
        return NULL;
    }
    return utf8;
}

static int
open_semaphores(FastAppend *self, PyObject *names, PyObject *pool_lock)
{
    const char *name = semaphore_name("pool_lock", pool_lock);

    if (name == NULL) {
        return -1;
    }
    self->pool_sem = sem_open(name, 0);
    if (self->pool_sem == SEM_FAILED) {
        self->pool_sem = NULL;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, name);
        return -1;
    }
    self->sems = PyMem_Calloc((size_t)PyList_GET_SIZE(names),
                              sizeof(sem_t *));
    if (self->sems == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->n_sems = PyList_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < self->n_sems; i++) {
        name = semaphore_name("semaphores", PyList_GET_ITEM(names, i));
        if (name == NULL) {
            return -1;
        }
        self->sems[i] = sem_open(name, 0);
        if (self->sems[i] == SEM_FAILED) {
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, name);
            return -1;
        }
    }
    return 0;
}

/* FastAppend(buffer, semaphores, layout, pool_lock). Runs once: a second
 * call would leak the first one's buffer view and semaphores, so it raises
 * RuntimeError and leaves the object as it was. A failed call releases what
 * it took. */
static int
FastAppend_init(FastAppend *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer", "semaphores", "layout", "pool_lock",
                             NULL};
    PyObject *buffer, *names, *layout, *pool_lock;

    if (self->initialized) {
        PyErr_SetString(PyExc_RuntimeError,
                        "FastAppend.__init__() called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO:FastAppend", kwlist,
                                     &buffer, &names, &layout, &pool_lock))
    {
        return -1;
    }
    if (!PyList_Check(names)) {
        bad_argument("FastAppend", "semaphores", "list", names);
        return -1;
    }
    if (PyList_GET_SIZE(names) == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "FastAppend() argument 'semaphores' must not be "
                        "empty");
        return -1;
    }
    if (!PyDict_Check(layout)) {
        bad_argument("FastAppend", "layout", "dict", layout);
        return -1;
    }
    if (read_layout(self, layout) < 0) {
        return -1;
    }
    if (PyObject_GetBuffer(buffer, &self->view,
                           PyBUF_WRITABLE | PyBUF_SIMPLE) < 0)
    {
        return -1;
    }
    self->has_view = 1;
    if (self->slabs_at + self->num_slabs * self->slab_size > self->view.len) {
        PyErr_Format(PyExc_ValueError,
                     "FastAppend() argument 'layout' does not fit argument "
                     "'buffer' (%zd bytes)", self->view.len);
        FastAppend_release(self);
        return -1;
    }
    if (open_semaphores(self, names, pool_lock) < 0) {
        FastAppend_release(self);
        return -1;
    }
    self->initialized = 1;
    return 0;
}

/* ------------------------------------------------------------------------
 * The fast path.
 */

typedef struct {
    const char *ptr;
    Py_ssize_t len;
} Piece;


/* Take pool lock ``index`` as LockSet.acquire does (intent byte, semaphore,
 * owner record), spinning briefly: 1 when taken, 0 when busy (the caller
 * falls back to Python). */
static int
take_lock(FastAppend *self, Py_ssize_t index, sem_t *sem)
{
    char *buf = (char *)self->view.buf;
    char *intent = buf + self->intent_at0 + index;

    if (*intent) {
        return 0;  /* another thread of this process holds or wants it */
    }
    *intent = 1;
    /* Critical sections last about a microsecond: spin briefly before giving
     * up to the slow path, whose blocking wait costs a context switch. */
    for (int spin = 0; spin < SPIN_TRIES; spin++) {
        if (sem_trywait(sem) == 0) {
            char *owner = buf + self->locks_at + index * self->lock_stride;

            wr32(owner + self->lock_owner_slot, (uint32_t)self->slot);
            wr32(owner + self->lock_owner_pid, (uint32_t)self->pid);
            wr64(owner + self->lock_owner_start, (uint64_t)self->started);
            return 1;
        }
        cpu_relax();
    }
    *intent = 0;
    return 0;
}

static void
drop_lock(FastAppend *self, Py_ssize_t index, sem_t *sem)
{
    char *buf = (char *)self->view.buf;
    char *owner = buf + self->locks_at + index * self->lock_stride;

    wr32(owner + self->lock_owner_slot, (uint32_t)-1);
    wr32(owner + self->lock_owner_pid, 0);
    wr64(owner + self->lock_owner_start, 0);
    sem_post(sem);
    buf[self->intent_at0 + index] = 0;
}

/* A record's bytes before its tail: length, attributes, timestamp delta,
 * offset delta. */
static int
record_head(unsigned char *out, int64_t timestamp_delta,
            uint32_t offset_delta, Py_ssize_t tail_len)
{
    unsigned char deltas[21];
    int d = put_varlong(deltas, timestamp_delta);

    d += put_varlong(deltas + d, (int64_t)offset_delta);
    int n = put_varlong(out, 1 + d + tail_len);
    out[n++] = 0;  /* attributes */
    memcpy(out + n, deltas, (size_t)d);
    return n + d;
}

static void
copy_record(char *dst, const unsigned char *head, int n,
            const Piece *pieces, int n_pieces)
{
    memcpy(dst, head, (size_t)n);
    dst += n;
    for (int i = 0; i < n_pieces; i++) {
        memcpy(dst, pieces[i].ptr, (size_t)pieces[i].len);
        dst += pieces[i].len;
    }
}

/* Append to the last batch of the deque if it is OPEN and has room (stripe
 * lock held). When it is OPEN but too full, *grow_to is how many slabs the
 * next batch asks for. */
static int
append_to_last(FastAppend *self, char *deque, int64_t timestamp,
               int64_t now_ms, const Piece *pieces, int n_pieces,
               Py_ssize_t tail_len, Hit *hit, Py_ssize_t *grow_to)
{
    char *buf = (char *)self->view.buf;
    uint64_t ends = rd64(deque + self->d_ends);
    uint32_t first = (uint32_t)ends;
    uint32_t batch_id = (uint32_t)(ends >> 32);

    if (first >= (uint32_t)self->num_slabs
        || batch_id >= (uint32_t)self->num_slabs)
    {
        /* empty, or damaged ends (the Sender quarantines the deque) */
        return NEEDS_NEW_BATCH;
    }
    char *batch = (buf + self->batches_at
                   + (Py_ssize_t)batch_id * self->batch_stride);
    if (rd32(batch + self->b_state) != (uint32_t)self->open_state) {
        return NEEDS_NEW_BATCH;
    }
    uint32_t first_slab = rd32(batch + self->b_first_slab);
    uint32_t slab_count = rd32(batch + self->b_slab_count);
    uint32_t write_pos = rd32(batch + self->b_write_pos);
    uint32_t count = rd32(batch + self->b_record_count);
    if (self->batch_max_records > 0
        && count >= (uint32_t)self->batch_max_records)
    {
        return NEEDS_NEW_BATCH;  /* full by count: the next run as long */
    }
    int64_t max_ts = (int64_t)rd64(batch + self->b_max_ts);
    int64_t base_ts = (int64_t)rd64(batch + self->b_base_ts);
    unsigned char head_bytes[32];
    int n = record_head(head_bytes, timestamp - base_ts, count, tail_len);
    int64_t end = (int64_t)write_pos + n + tail_len;
    int64_t capacity = (int64_t)slab_count * self->slab_size;
    if (end > capacity) {
        /* full by bytes before the Sender took it: the next run is twice as
         * long (RecordAccumulator._run_wanted) */
        *grow_to = 2 * (Py_ssize_t)slab_count;
        return NEEDS_NEW_BATCH;
    }
    char *slab = (buf + self->slabs_at
                  + (Py_ssize_t)first_slab * self->slab_size);
    copy_record(slab + write_pos, head_bytes, n, pieces, n_pieces);
    char *bits = (buf + self->appenders_at
                  + (Py_ssize_t)batch_id * self->appenders_size
                  + (self->slot >> 3));
    unsigned char bit = (unsigned char)(1u << (self->slot & 7));
    if (!(*bits & bit)) {
        *bits |= bit;
    }
    /* Publish last: the times, then write_pos | count << 32 in one aligned
     * 8-byte store (layout.py), so a process killed at any instruction
     * leaves no partial record. */
    uint32_t new_count = count + 1;
    int64_t new_max = timestamp > max_ts ? timestamp : max_ts;
    wr64(batch + self->b_max_ts, (uint64_t)new_max);
    wr64(batch + self->b_last_append, (uint64_t)now_ms);
    store_release64(batch + self->b_publish,
                    (uint64_t)(uint32_t)end | (uint64_t)new_count << 32);
    hit->batch_id = batch_id;
    hit->generation = rd32(batch + self->b_generation);
    hit->offset_delta = count;
    hit->full = (capacity - end) < (n + tail_len)
                || (self->batch_max_records > 0
                    && new_count >= (uint32_t)self->batch_max_records);
    hit->queued = first == batch_id ? 1 : 2;  /* (only "more than one" is used) */
    hit->new_batch = 0;
    hit->wake = hit->full;
    return APPENDED;
}

/* The first free run of `want` slabs in the free map from slab `from` on
 * (then from 0: next fit, BufferPool._take), else the longest shorter one:
 * *length gets its length (0: none free). */
static Py_ssize_t
find_run(const char *freemap, Py_ssize_t num_slabs, Py_ssize_t want,
         Py_ssize_t from, Py_ssize_t *length)
{
    Py_ssize_t best = -1, best_len = 0;

    if (from > 0 && from < num_slabs) {
        Py_ssize_t first = find_run(freemap + from, num_slabs - from, want, 0,
                                    length);
        if (first >= 0 && *length >= want) {
            return from + first;
        }
        best = first >= 0 ? from + first : -1;
        best_len = first >= 0 ? *length : 0;
    }
    Py_ssize_t i = 0;
    while (i < num_slabs) {
        const char *free_at = memchr(freemap + i, 0, (size_t)(num_slabs - i));
        if (free_at == NULL) {
            break;
        }
        Py_ssize_t start = free_at - freemap, end = start + 1;
        while (end < num_slabs && end - start < want && freemap[end] == 0) {
            end++;
        }
        if (end - start > best_len) {
            best = start;
            best_len = end - start;
            if (best_len >= want) {
                break;
            }
        }
        i = end;
    }
    *length = best_len;
    return best;
}

/* Take a run of `want` free slabs (or the longest shorter one) as
 * BufferPool.allocate does in its common case (nobody queued for memory,
 * nothing pending in our slot), recording it as pending in our slot first.
 * Returns the first slab and sets *count, or -1 (Python allocates: it may
 * wait or queue). */
static Py_ssize_t
take_run(FastAppend *self, Py_ssize_t want, Py_ssize_t *count)
{
    char *buf = (char *)self->view.buf;
    Py_ssize_t first = -1;

    if (rd32(buf + self->pending_first_at) != (uint32_t)self->no_slab) {
        return -1;  /* another thread of ours is allocating */
    }
    if (!take_lock(self, self->pool_lock, self->pool_sem)) {
        return -1;
    }
    if (rd64(buf + self->waitq_head_at) == rd64(buf + self->waitq_tail_at)) {
        char *freemap = buf + self->freemap_at;
        Py_ssize_t cursor = (Py_ssize_t)rd32(buf + self->alloc_cursor_at);
        first = find_run(freemap, self->num_slabs, want, cursor, count);
        if (first >= 0) {
            wr32(buf + self->alloc_cursor_at, (uint32_t)(first + *count));
            wr32(buf + self->pending_first_at, (uint32_t)first);
            wr32(buf + self->pending_count_at, (uint32_t)*count);
            memset(freemap + first, 1, (size_t)*count);
        }
    }
    drop_lock(self, self->pool_lock, self->pool_sem);
    return first;
}

/* How many slabs a new batch of this deque asks for: `grow_to` (the last
 * batch filled while open) or the deque's run hint, within 1..max_run. */
static Py_ssize_t
run_wanted(FastAppend *self, const char *deque, Py_ssize_t grow_to)
{
    Py_ssize_t want = grow_to > 0 ? grow_to
                                  : (Py_ssize_t)rd32(deque + self->d_run_hint);
    if (want < 1) {
        want = 1;
    }
    return want > self->max_run ? self->max_run : want;
}

/* A new batch needs the Sender's attention within linger.ms. Skip the wake
 * (a semaphore post, two context switches) when the Sender will look in time
 * by itself: it is looking now (wake_at 0; it re-reads new_batches before it
 * sleeps), or it sleeps until no later than now + linger. The counter store
 * and the wake_at load are ordered by a full fence, as the Sender orders its
 * wake_at store and counter load (Dekker-style). */
static int
sender_needs_wake(FastAppend *self, int64_t now_ms)
{
    char *buf = (char *)self->view.buf;

    /* atomic across processes: the counter only grows, so any change is
     * seen */
    __atomic_add_fetch((uint64_t *)(void *)(buf + self->new_batches_at), 1,
                       __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int64_t wake_at = (int64_t)rd64(buf + self->sender_wake_at);
    int64_t linger = (int64_t)rd64(buf + self->sender_linger_at);
    return wake_at != 0 && wake_at > now_ms + linger;
}

/* Open a batch on a fresh slab holding this one record and queue it on the
 * deque (stripe lock held), in RecordAccumulator._open_batch's order:
 * descriptor and record first, then the deque push that publishes the
 * batch, then the pending record is cleared. */
static int
open_batch(FastAppend *self, char *deque, Py_ssize_t deque_id,
           int64_t timestamp, int64_t now_ms, const Piece *pieces,
           int n_pieces, Py_ssize_t tail_len, Py_ssize_t grow_to, Hit *hit)
{
    char *buf = (char *)self->view.buf;
    unsigned char head_bytes[32];
    int n = record_head(head_bytes, 0, 0, tail_len);
    int64_t end = self->record_batch_header + n + tail_len;
    if (end > self->slab_size) {
        return NEEDS_NEW_BATCH;  /* a record larger than a slab: Python's job */
    }
    Py_ssize_t slab_count = 0;
    Py_ssize_t slab = take_run(self, run_wanted(self, deque, grow_to),
                               &slab_count);
    if (slab < 0) {
        return NEEDS_NEW_BATCH;
    }
    int64_t capacity = (int64_t)slab_count * self->slab_size;
    char *records = buf + self->slabs_at + slab * self->slab_size;
    copy_record(records + self->record_batch_header, head_bytes, n, pieces,
                n_pieces);
    char *batch = buf + self->batches_at + slab * self->batch_stride;
    uint32_t generation = rd32(batch + self->b_generation) + 1;
    int16_t no_epoch = -1;
    wr32(batch + self->b_generation, generation);
    wr32(batch + self->b_deque, (uint32_t)deque_id);
    wr32(batch + self->b_first_slab, (uint32_t)slab);
    wr32(batch + self->b_slab_count, (uint32_t)slab_count);
    wr32(batch + self->b_attempts, 0);
    wr32(batch + self->b_write_pos, (uint32_t)end);
    wr32(batch + self->b_record_count, 1);
    wr64(batch + self->b_max_ts, (uint64_t)timestamp);
    wr64(batch + self->b_last_append, (uint64_t)now_ms);
    wr64(batch + self->b_base_ts, (uint64_t)timestamp);
    wr64(batch + self->b_created, (uint64_t)now_ms);
    wr64(batch + self->b_producer_id, (uint64_t)-1);
    memcpy(batch + self->b_producer_epoch, &no_epoch, sizeof(no_epoch));
    wr32(batch + self->b_base_sequence, (uint32_t)-1);
    char *appenders = (buf + self->appenders_at
                       + slab * self->appenders_size);
    memset(appenders, 0, (size_t)self->appenders_size);
    appenders[self->slot >> 3] = (char)(1u << (self->slot & 7));
    wr32(batch + self->b_parent, (uint32_t)self->no_parent);
    wr32(batch + self->b_parent_generation, 0);
    wr32(batch + self->b_parent_delta, 0);
    /* last: the descriptor is whole */
    store_release32(batch + self->b_state, (uint32_t)self->open_state);
    /* the deque is active before the batch is in it (batches.py) */
    char *active = buf + self->active_at + deque_id;
    if (!*active) {
        *active = 1;
    }
    uint64_t ends = rd64(deque + self->d_ends);
    uint32_t first = (uint32_t)ends;
    uint32_t last = (uint32_t)(ends >> 32);
    int was_empty = first >= (uint32_t)self->num_slabs
                    || last >= (uint32_t)self->num_slabs;
    if (!was_empty) {
        wr32(buf + self->batches_at + (Py_ssize_t)last * self->batch_stride
             + self->b_next, (uint32_t)slab);
    }
    /* publish: the batch is queued */
    store_release64(deque + self->d_ends,
                    (uint64_t)(was_empty ? (uint32_t)slab : first)
                    | (uint64_t)(uint32_t)slab << 32);
    /* committed: the batch owns the slab */
    wr32(buf + self->pending_first_at, (uint32_t)self->no_slab);
    wr32(buf + self->pending_count_at, 0);
    hit->batch_id = (uint32_t)slab;
    hit->generation = generation;
    hit->offset_delta = 0;
    hit->full = (capacity - end) < (n + tail_len) || self->batch_max_records == 1;
    hit->queued = was_empty ? 1 : 2;
    hit->new_batch = 1;
    hit->wake = hit->full || sender_needs_wake(self, now_ms);
    return APPENDED;
}

/* The fast path proper: lock the stripe, check that the directory is still
 * at ``version`` (the one the caller resolved the deque at; -1: unchecked),
 * append one record whose part after the offset delta is the concatenation
 * of ``pieces`` (opening a batch for it when ``may_open`` and the last one
 * has no room), publish, unlock. Returns APPENDED with ``hit`` filled, or
 * BUSY (also: the directory moved) / NEEDS_NEW_BATCH when Python must take
 * the slow path. The version is read under the lock: a topic is retired,
 * its deques given back, only under their stripe locks and with a new
 * version (directory.py), so no record reaches a deque given back. */
static int
fast_append(FastAppend *self, Py_ssize_t deque_id, int64_t version,
            int64_t timestamp, int64_t now_ms, const Piece *pieces,
            int n_pieces, int may_open, Hit *hit)
{
    Py_ssize_t tail_len = 0;

    for (int i = 0; i < n_pieces; i++) {
        tail_len += pieces[i].len;
    }
    Py_ssize_t stripe = deque_id % self->n_sems;
    Py_ssize_t lock = self->first_stripe + stripe;
    if (!take_lock(self, lock, self->sems[stripe])) {
        return BUSY;
    }
    if (version >= 0
        && rd64((const char *)self->view.buf + self->directory_version_at)
               != (uint64_t)version)
    {
        drop_lock(self, lock, self->sems[stripe]);
        return BUSY;
    }
    char *deque = ((char *)self->view.buf + self->deques_at
                   + deque_id * self->deque_size);
    Py_ssize_t grow_to = 0;
    int result = append_to_last(self, deque, timestamp, now_ms, pieces,
                                n_pieces, tail_len, hit, &grow_to);
    if (result == NEEDS_NEW_BATCH && may_open) {
        result = open_batch(self, deque, deque_id, timestamp, now_ms, pieces,
                            n_pieces, tail_len, grow_to, hit);
    }
    drop_lock(self, lock, self->sems[stripe]);
    return result;
}

/* A tuple of the n new references in items (stolen), or NULL when one of
 * them is NULL: what Py_BuildValue makes, without parsing a format on every
 * call (a third of a call's instructions). */
static PyObject *
tuple_of(PyObject **items, Py_ssize_t n)
{
    PyObject *tuple = NULL;

    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] == NULL) {
            goto error;
        }
    }
    tuple = PyTuple_New(n);
    if (tuple == NULL) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(tuple, i, items[i]);
    }
    return tuple;

error:
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(items[i]);
    }
    return NULL;
}

/* (batch_id, generation, offset_delta, batch_is_full, queued), or None. */
static PyObject *
hit_tuple(int appended, const Hit *hit)
{
    PyObject *items[5];

    if (appended != APPENDED) {
        Py_RETURN_NONE;
    }
    items[0] = PyLong_FromUnsignedLong(hit->batch_id);
    items[1] = PyLong_FromUnsignedLong(hit->generation);
    items[2] = PyLong_FromUnsignedLong(hit->offset_delta);
    items[3] = PyLong_FromLong(hit->full);
    items[4] = PyLong_FromUnsignedLongLong(hit->queued);
    return tuple_of(items, Py_ARRAY_LENGTH(items));
}

/* The arguments append() and append_kv() share: deque_id and timestamp_ms
 * first, now_ms and version last. */
static inline int
append_args(FastAppend *self, const char *fname, PyObject *const *args,
            Py_ssize_t nargs, Py_ssize_t expected, Py_ssize_t *deque_id,
            int64_t *timestamp, int64_t *now_ms, int64_t *version)
{
    if (check_nargs(fname, nargs, expected) < 0
        || check_open(self, fname) < 0
        || ssize_arg(fname, "deque_id", args[0], deque_id) < 0
        || int64_arg(fname, "timestamp_ms", args[1], timestamp) < 0
        || int64_arg(fname, "now_ms", args[expected - 2], now_ms) < 0
        || int64_arg(fname, "version", args[expected - 1], version) < 0)
    {
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(FastAppend_append__doc__,
"append($self, deque_id, timestamp_ms, tail, now_ms, version, /)\n"
"--\n"
"\n"
"Append a record whose part after the offset delta (key, value and\n"
"headers, encoded) is tail, if the directory is still at version (the\n"
"one deque_id was resolved at; -1: unchecked). Returns (batch_id,\n"
"generation, offset_delta, batch_is_full, queued), or None: take the\n"
"slow path.");

static PyObject *
FastAppend_append(FastAppend *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t deque_id;
    int64_t timestamp, now_ms, version;
    Piece piece;
    Hit hit;

    if (append_args(self, "append", args, nargs, 5, &deque_id, &timestamp,
                    &now_ms, &version) < 0)
    {
        return NULL;
    }
    if (!PyBytes_Check(args[2])) {
        bad_argument("append", "tail", "bytes", args[2]);
        return NULL;
    }
    piece.ptr = PyBytes_AS_STRING(args[2]);
    piece.len = PyBytes_GET_SIZE(args[2]);
    return hit_tuple(fast_append(self, deque_id, version, timestamp, now_ms,
                                 &piece, 1, 0, &hit), &hit);
}

/* Append a record without headers: its key and value (bytes or None)
 * encoded here. */
static int
append_kv(FastAppend *self, Py_ssize_t deque_id, int64_t version,
          int64_t timestamp, int64_t now_ms, PyObject *key, PyObject *value,
          int may_open, Hit *hit)
{
    static const char no_headers = 0;
    unsigned char key_len[10], value_len[10];
    PyObject *fields[2] = {key, value};
    unsigned char *lens[2] = {key_len, value_len};
    Piece pieces[5];
    int n = 0;

    for (int i = 0; i < 2; i++) {
        pieces[n].ptr = (const char *)lens[i];
        if (fields[i] == Py_None) {
            pieces[n++].len = put_varlong(lens[i], -1);
            continue;
        }
        pieces[n++].len = put_varlong(lens[i], PyBytes_GET_SIZE(fields[i]));
        pieces[n].ptr = PyBytes_AS_STRING(fields[i]);
        pieces[n++].len = PyBytes_GET_SIZE(fields[i]);
    }
    pieces[n].ptr = &no_headers;
    pieces[n++].len = 1;
    return fast_append(self, deque_id, version, timestamp, now_ms, pieces, n,
                       may_open, hit);
}

PyDoc_STRVAR(FastAppend_append_kv__doc__,
"append_kv($self, deque_id, timestamp_ms, key, value, now_ms, version, /)\n"
"--\n"
"\n"
"Append a record without headers (key and value: bytes or None). Same\n"
"result as append().");

static PyObject *
FastAppend_append_kv(FastAppend *self, PyObject *const *args,
                     Py_ssize_t nargs)
{
    Py_ssize_t deque_id;
    int64_t timestamp, now_ms, version;
    Hit hit;

    if (append_args(self, "append_kv", args, nargs, 6, &deque_id,
                    &timestamp, &now_ms, &version) < 0)
    {
        return NULL;
    }
    if (args[2] != Py_None && !PyBytes_Check(args[2])) {
        bad_argument("append_kv", "key", "bytes or None", args[2]);
        return NULL;
    }
    if (args[3] != Py_None && !PyBytes_Check(args[3])) {
        bad_argument("append_kv", "value", "bytes or None", args[3]);
        return NULL;
    }
    return hit_tuple(append_kv(self, deque_id, version, timestamp, now_ms,
                               args[2], args[3], 0, &hit), &hit);
}

/* Kafka's murmur2 (the Java client's Utils.murmur2: seed 0x9747b28c, 4-byte
 * little-endian words, the tail folded in from its last byte down), as
 * protocol/hashing.py computes it. */
static uint32_t
murmur2(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t words = length / 4;

    for (Py_ssize_t i = 0; i < words; i++) {
        uint32_t k = rd32((const char *)data + 4 * i);

        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + 4 * words;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static int64_t
clock_ms(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

PyDoc_STRVAR(FastAppend_send_kv__doc__,
"send_kv($self, route, partition, key, value, /)\n"
"--\n"
"\n"
"The whole of ProducerHandle.send for a record without headers or\n"
"explicit timestamp. route = (directory_version, deque_ids) as the caller\n"
"last read the directory; partition -1 = murmur2(key) % partitions (key\n"
"required).\n"
"\n"
"Returns ((batch_id << 32) | generation, flags (1: batch full, 2: new\n"
"batch, 4: wake the Sender), partition, offset_delta, timestamp, key_size,\n"
"value_size): handle.py's RecordFacts; an int: that partition needs a new\n"
"batch (nothing was written); None: the directory moved, the stripe is\n"
"busy, or the input needs the Python path.");

/* The whole of a headerless record's send: see send_kv's doc. Returns
 * APPENDED (out filled), NEEDS_NEW_BATCH (out->partition needs one), SEND_SLOW
 * (the Python path's job), or -1 with an exception set. */
static int
fastappend_send_kv(PyObject *fast, PyObject *route, Py_ssize_t partition,
                   PyObject *key, PyObject *value, SendResult *out)
{
    FastAppend *self = (FastAppend *)fast;

    if (check_open(self, "send_kv") < 0) {
        return -1;
    }
    if (!PyTuple_CheckExact(route) || PyTuple_GET_SIZE(route) != 2) {
        PyErr_SetString(PyExc_TypeError,
                        "send_kv() argument 'route' must be "
                        "(version, deque_ids)");
        return -1;
    }
    uint64_t version = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(route, 0));
    if (version == (uint64_t)-1 && PyErr_Occurred()) {
        return -1;
    }
    PyObject *deques = PyTuple_GET_ITEM(route, 1);
    if (!PyTuple_CheckExact(deques) || PyTuple_GET_SIZE(deques) == 0) {
        PyErr_SetString(PyExc_TypeError,
                        "send_kv() argument 'route': deque_ids must be a "
                        "non-empty tuple");
        return -1;
    }
    const char *buf = (const char *)self->view.buf;
    if (rd64(buf + self->directory_version_at) != version) {
        return SEND_SLOW;
    }
    if ((key != Py_None && !PyBytes_CheckExact(key))
        || (value != Py_None && !PyBytes_CheckExact(value)))
    {
        return SEND_SLOW;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(deques);
    if (partition < 0) {
        if (key == Py_None) {
            return SEND_SLOW;
        }
        uint32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(key),
                             PyBytes_GET_SIZE(key));
        partition = (Py_ssize_t)((h & 0x7fffffffu) % (uint32_t)count);
    }
    else if (partition >= count) {
        return SEND_SLOW;
    }
    Py_ssize_t deque_id = PyLong_AsSsize_t(PyTuple_GET_ITEM(deques,
                                                            partition));
    if (deque_id == -1 && PyErr_Occurred()) {
        return -1;
    }
    out->partition = partition;
    out->timestamp = clock_ms(CLOCK_REALTIME);
    int64_t now_ms = clock_ms(CLOCK_MONOTONIC);  /* = time.monotonic() */
    int appended = append_kv(self, deque_id, (int64_t)version, out->timestamp,
                             now_ms, key, value, 1, &out->hit);
    return appended == BUSY ? SEND_SLOW : appended;
}

static Py_ssize_t
fastappend_sticky(PyObject *fast, PyObject *route)
{
    FastAppend *self = (FastAppend *)fast;

    if (!self->has_view || !PyTuple_CheckExact(route)
        || PyTuple_GET_SIZE(route) != 2)
    {
        return -1;
    }
    PyObject *deques = PyTuple_GET_ITEM(route, 1);
    if (!PyTuple_CheckExact(deques) || PyTuple_GET_SIZE(deques) == 0) {
        return -1;
    }
    Py_ssize_t deque_id = PyLong_AsSsize_t(PyTuple_GET_ITEM(deques, 0));
    if (deque_id < 0) {
        PyErr_Clear();
        return -1;
    }
    const char *deque = ((const char *)self->view.buf + self->deques_at
                         + deque_id * self->deque_size);
    uint32_t sticky = rd32(deque + self->d_sticky);
    if (sticky == 0 || (Py_ssize_t)sticky > PyTuple_GET_SIZE(deques)) {
        return -1;
    }
    return (Py_ssize_t)sticky - 1;
}

static PyObject *
FastAppend_send_kv(FastAppend *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t partition;
    SendResult sent;

    if (check_nargs("send_kv", nargs, 4) < 0
        || ssize_arg("send_kv", "partition", args[1], &partition) < 0)
    {
        return NULL;
    }
    PyObject *key = args[2], *value = args[3];
    int status = fastappend_send_kv((PyObject *)self, args[0], partition, key,
                                    value, &sent);
    if (status < 0) {
        return NULL;
    }
    if (status == NEEDS_NEW_BATCH) {
        return PyLong_FromSsize_t(sent.partition);
    }
    if (status == SEND_SLOW) {
        Py_RETURN_NONE;
    }
    Hit *hit = &sent.hit;
    PyObject *items[7];
    items[0] = PyLong_FromUnsignedLongLong(
        ((unsigned long long)hit->batch_id << 32) | hit->generation);
    items[1] = PyLong_FromLong(
        hit->full | (hit->new_batch << 1) | (hit->wake << 2));
    items[2] = PyLong_FromSsize_t(sent.partition);
    items[3] = PyLong_FromUnsignedLong(hit->offset_delta);
    items[4] = PyLong_FromLongLong(sent.timestamp);
    items[5] = PyLong_FromSsize_t(key == Py_None ? -1 : PyBytes_GET_SIZE(key));
    items[6] = PyLong_FromSsize_t(value == Py_None ? -1
                                                   : PyBytes_GET_SIZE(value));
    return tuple_of(items, Py_ARRAY_LENGTH(items));
}

PyDoc_STRVAR(FastAppend_offsets__doc__,
"offsets($self, /)\n"
"--\n"
"\n"
"The memory map given at initialisation, {key: value}: the keys of\n"
"fastpath.fast_path_offsets that this code reads.");

static PyObject *
FastAppend_offsets(FastAppend *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyDict_New();

    if (out == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < N_LAYOUT_FIELDS; i++) {
        PyObject *value = PyLong_FromSsize_t(*layout_field(self, i));

        if (value == NULL
            || PyDict_SetItemString(out, layout_fields[i].key, value) < 0)
        {
            Py_XDECREF(value);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(value);
    }
    return out;
}

PyDoc_STRVAR(FastAppend_close__doc__,
"close($self, /)\n"
"--\n"
"\n"
"Release the buffer and the semaphores (the object is closed after).");

static PyObject *
FastAppend_close(FastAppend *self, PyObject *Py_UNUSED(ignored))
{
    FastAppend_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef FastAppend_methods[] = {
    {"append", (PyCFunction)(void (*)(void))FastAppend_append,
     METH_FASTCALL, FastAppend_append__doc__},
    {"append_kv", (PyCFunction)(void (*)(void))FastAppend_append_kv,
     METH_FASTCALL, FastAppend_append_kv__doc__},
    {"send_kv", (PyCFunction)(void (*)(void))FastAppend_send_kv,
     METH_FASTCALL, FastAppend_send_kv__doc__},
    {"offsets", (PyCFunction)FastAppend_offsets, METH_NOARGS,
     FastAppend_offsets__doc__},
    {"close", (PyCFunction)FastAppend_close, METH_NOARGS,
     FastAppend_close__doc__},
    {NULL, NULL, 0, NULL}
};

PyDoc_STRVAR(FastAppend__doc__,
"FastAppend(buffer, semaphores, layout, pool_lock)\n"
"--\n"
"\n"
"The append fast path over a pool segment (see accumulator.py): buffer is\n"
"the segment, semaphores the stripe locks' names, layout\n"
"fastpath.fast_path_offsets plus slot, pid, started and record_batch_header,\n"
"pool_lock the pool lock's name.");

static PyTypeObject FastAppendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmkafka.pool._append.FastAppend",
    .tp_basicsize = sizeof(FastAppend),
    .tp_dealloc = (destructor)FastAppend_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = FastAppend__doc__,
    .tp_methods = FastAppend_methods,
    .tp_init = (initproc)FastAppend_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------
 * The module (multi-phase initialisation, PEP 489).
 */

PyDoc_STRVAR(full_fence__doc__,
"full_fence($module, /)\n"
"--\n"
"\n"
"A full memory fence (the Sender's side of the new-batch wake protocol).");

static PyObject *
full_fence(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"full_fence", (PyCFunction)full_fence, METH_NOARGS, full_fence__doc__},
    {NULL, NULL, 0, NULL}
};

static const AppendAPI append_api = {
    .fast_append_type = &FastAppendType,
    .send_kv = fastappend_send_kv,
    .sticky = fastappend_sticky,
};

static int
append_exec(PyObject *module)
{
    if (PyModule_AddType(module, &FastAppendType) < 0) {
        return -1;
    }
    PyObject *capsule = PyCapsule_New((void *)&append_api,
                                      APPEND_API_CAPSULE, NULL);
    if (capsule == NULL) {
        return -1;
    }
    if (PyModule_AddObject(module, "_API", capsule) < 0) {
        Py_DECREF(capsule);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot append_slots[] = {
    {Py_mod_exec, append_exec},
#ifdef Py_mod_multiple_interpreters
    /* FastAppend is a static type, shared by every interpreter */
    {Py_mod_multiple_interpreters,
     Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL}
};

static struct PyModuleDef append_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shmkafka.pool._append",
    .m_doc = "The accumulator's append fast path in C.",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = append_slots,
};

PyMODINIT_FUNC
PyInit__append(void)
{
    return PyModuleDef_Init(&append_module);
}
