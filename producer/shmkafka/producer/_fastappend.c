/*
 * The append fast path in C: lock the partition's stripe, append one framed record to the
 * last OPEN batch of its deque, publish, unlock -- the same steps, in the same order, as
 * RecordAccumulator._try_append under LockSet.acquire/release (accumulator.py, locks.py),
 * which stay the reference and the fallback.
 *
 * Rules (as in locks.py and layout.py):
 * - The intent byte is set before the semaphore is taken and cleared after it is posted.
 *   If this process already shows intent for the stripe (another of its threads holds or
 *   wants it), or the semaphore is taken, we return None and Python takes the slow path.
 * - The record bytes are written before the publish fields (write_pos, record_count,
 *   max_timestamp, last_append_ms), which are written last.
 * - Every offset comes from layout.py through the constructor: nothing here hard-codes the
 *   memory map. The GIL is held throughout, so no other thread of this process interleaves.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the pool layout is little-endian; use the pure-Python path on this host"
#endif

#define SPIN_TRIES 200
#if defined(__x86_64__) || defined(__i386__)
static inline void cpu_relax(void) { __builtin_ia32_pause(); }
#else
static inline void cpu_relax(void) {}
#endif

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int has_view;
    sem_t **sems;
    Py_ssize_t n_sems;
    sem_t *pool_sem; /* opening a batch (send_kv only) */
    /* the memory map: Layout.fast_path_offsets (layout.py), see layout_fields */
    Py_ssize_t directory_version_at, sender_wake_at, sender_linger_at, new_batches_at;
    Py_ssize_t waitq_head_at, waitq_tail_at;
    Py_ssize_t locks_at, lock_stride, lock_owner_slot, lock_owner_pid, lock_owner_start;
    Py_ssize_t pool_lock, first_stripe, intent_at0;
    Py_ssize_t pending_first_at, pending_count_at, no_slab;
    Py_ssize_t deques_at, deque_size, deque_capacity, d_head, d_tail, d_ring, d_entry_size;
    Py_ssize_t batches_at, batch_stride, b_state, b_generation, b_deque, b_first_slab;
    Py_ssize_t b_slab_count, b_attempts, b_publish, b_write_pos, b_record_count, b_max_ts;
    Py_ssize_t b_last_append, b_base_ts, b_created, b_producer_id, b_producer_epoch;
    Py_ssize_t b_base_sequence, b_appenders, appenders_size, b_parent, b_parent_generation;
    Py_ssize_t b_parent_delta, no_parent, open_state;
    Py_ssize_t freemap_at, num_slabs, slabs_at, batch_size;
    /* this process, and the record batch header the slabs reserve */
    Py_ssize_t record_batch_header;
    int32_t slot, pid;
    int64_t started;
} FastAppend;

/* Every key of the memory map FastAppend reads, and the field it goes to: exactly the keys
 * of Layout.fast_path_offsets (FastAppend.offsets() returns them for a test to compare). */
typedef struct {
    const char *key;
    size_t field;
} LayoutField;

#define LAYOUT_FIELD(name) {#name, offsetof(FastAppend, name)}
static const LayoutField layout_fields[] = {
    LAYOUT_FIELD(directory_version_at), LAYOUT_FIELD(sender_wake_at),
    LAYOUT_FIELD(sender_linger_at), LAYOUT_FIELD(new_batches_at),
    LAYOUT_FIELD(waitq_head_at), LAYOUT_FIELD(waitq_tail_at),
    LAYOUT_FIELD(locks_at), LAYOUT_FIELD(lock_stride), LAYOUT_FIELD(lock_owner_slot),
    LAYOUT_FIELD(lock_owner_pid), LAYOUT_FIELD(lock_owner_start), LAYOUT_FIELD(pool_lock),
    LAYOUT_FIELD(first_stripe), LAYOUT_FIELD(intent_at0),
    LAYOUT_FIELD(pending_first_at), LAYOUT_FIELD(pending_count_at), LAYOUT_FIELD(no_slab),
    LAYOUT_FIELD(deques_at), LAYOUT_FIELD(deque_size), LAYOUT_FIELD(deque_capacity),
    LAYOUT_FIELD(d_head), LAYOUT_FIELD(d_tail), LAYOUT_FIELD(d_ring), LAYOUT_FIELD(d_entry_size),
    LAYOUT_FIELD(batches_at), LAYOUT_FIELD(batch_stride), LAYOUT_FIELD(b_state),
    LAYOUT_FIELD(b_generation), LAYOUT_FIELD(b_deque), LAYOUT_FIELD(b_first_slab),
    LAYOUT_FIELD(b_slab_count), LAYOUT_FIELD(b_attempts), LAYOUT_FIELD(b_publish),
    LAYOUT_FIELD(b_write_pos), LAYOUT_FIELD(b_record_count), LAYOUT_FIELD(b_max_ts),
    LAYOUT_FIELD(b_last_append), LAYOUT_FIELD(b_base_ts), LAYOUT_FIELD(b_created),
    LAYOUT_FIELD(b_producer_id), LAYOUT_FIELD(b_producer_epoch),
    LAYOUT_FIELD(b_base_sequence), LAYOUT_FIELD(b_appenders), LAYOUT_FIELD(appenders_size),
    LAYOUT_FIELD(b_parent), LAYOUT_FIELD(b_parent_generation), LAYOUT_FIELD(b_parent_delta),
    LAYOUT_FIELD(no_parent), LAYOUT_FIELD(open_state),
    LAYOUT_FIELD(freemap_at), LAYOUT_FIELD(num_slabs), LAYOUT_FIELD(slabs_at),
    LAYOUT_FIELD(batch_size),
};
#define N_LAYOUT_FIELDS (sizeof(layout_fields) / sizeof(layout_fields[0]))

static Py_ssize_t *layout_field(FastAppend *self, size_t i) {
    return (Py_ssize_t *)((char *)self + layout_fields[i].field);
}

static inline uint32_t rd32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void wr32(char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void wr64(char *p, uint64_t v) { memcpy(p, &v, 8); }
/* One store, ordered after every earlier store (the compiler may not sink those past it):
 * what a publish needs when the writer can be killed between any two instructions. */
static inline void store_release32(char *p, uint32_t v) {
    __atomic_store_n((uint32_t *)(void *)p, v, __ATOMIC_RELEASE);
}
static inline void store_release64(char *p, uint64_t v) {
    __atomic_store_n((uint64_t *)(void *)p, v, __ATOMIC_RELEASE);
}

/* Zigzag varint of a signed 64-bit value; returns bytes written (at most 10). */
static inline int put_varlong(unsigned char *out, int64_t n) {
    uint64_t u = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    int i = 0;
    while (u >= 0x80) {
        out[i++] = (unsigned char)(u | 0x80);
        u >>= 7;
    }
    out[i++] = (unsigned char)u;
    return i;
}

static int get_ssize(PyObject *layout, const char *key, Py_ssize_t *out) {
    PyObject *v = PyDict_GetItemString(layout, key);
    if (v == NULL) {
        PyErr_Format(PyExc_KeyError, "layout is missing %s", key);
        return -1;
    }
    *out = PyLong_AsSsize_t(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static void FastAppend_release(FastAppend *self) {
    if (self->pool_sem) {
        sem_close(self->pool_sem);
        self->pool_sem = NULL;
    }
    if (self->sems) {
        for (Py_ssize_t i = 0; i < self->n_sems; i++)
            if (self->sems[i] && self->sems[i] != SEM_FAILED) sem_close(self->sems[i]);
        PyMem_Free(self->sems);
        self->sems = NULL;
    }
    if (self->has_view) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
    }
}

static void FastAppend_dealloc(FastAppend *self) {
    FastAppend_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int FastAppend_init(FastAppend *self, PyObject *args, PyObject *kwds) {
    PyObject *buffer, *names, *layout;
    const char *pool_sem_name;
    if (!PyArg_ParseTuple(args, "OO!O!s", &buffer, &PyList_Type, &names, &PyDict_Type, &layout,
                          &pool_sem_name))
        return -1;
    if (PyObject_GetBuffer(buffer, &self->view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) return -1;
    self->has_view = 1;
    for (size_t i = 0; i < N_LAYOUT_FIELDS; i++)
        if (get_ssize(layout, layout_fields[i].key, layout_field(self, i)) < 0) return -1;
    /* the u32 fields this code reads and stores whole */
    if (self->d_entry_size != (Py_ssize_t)sizeof(uint32_t) || self->b_write_pos != self->b_publish ||
        self->b_record_count != self->b_publish + (Py_ssize_t)sizeof(uint32_t)) {
        PyErr_SetString(PyExc_ValueError, "layout: ring entries must be u32 and the publish "
                                          "word write_pos | record_count << 32");
        return -1;
    }
    Py_ssize_t slot, pid, started;
    if (get_ssize(layout, "slot", &slot) < 0 || get_ssize(layout, "pid", &pid) < 0 ||
        get_ssize(layout, "started", &started) < 0 ||
        get_ssize(layout, "record_batch_header", &self->record_batch_header) < 0)
        return -1;
    self->slot = (int32_t)slot;
    self->pid = (int32_t)pid;
    self->started = (int64_t)started;
    self->pool_sem = sem_open(pool_sem_name, 0);
    if (self->pool_sem == SEM_FAILED) {
        self->pool_sem = NULL;
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, pool_sem_name);
        return -1;
    }
    self->n_sems = PyList_GET_SIZE(names);
    self->sems = PyMem_Calloc((size_t)self->n_sems, sizeof(sem_t *));
    if (!self->sems) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < self->n_sems; i++) {
        const char *name = PyUnicode_AsUTF8(PyList_GET_ITEM(names, i));
        if (!name) return -1;
        self->sems[i] = sem_open(name, 0);
        if (self->sems[i] == SEM_FAILED) {
            PyErr_SetFromErrnoWithFilename(PyExc_OSError, name);
            return -1;
        }
    }
    return 0;
}

typedef struct {
    const char *ptr;
    Py_ssize_t len;
} Piece;

#define BUSY 0            /* the stripe is taken: Python waits for it */
#define APPENDED 1
#define NEEDS_NEW_BATCH 2 /* no open batch with room: Python opens one */

typedef struct {
    uint32_t batch_id, generation, offset_delta;
    int full, new_batch, wake;
    uint64_t queued;
} Hit;

/* Take pool lock ``index`` as LockSet.acquire does (intent byte, semaphore, owner record),
 * spinning briefly: 1 when taken, 0 when busy (the caller falls back to Python). */
static int take_lock(FastAppend *self, Py_ssize_t index, sem_t *sem) {
    char *buf = (char *)self->view.buf;
    char *intent = buf + self->intent_at0 + index;
    if (*intent) return 0; /* another thread of this process holds or wants it */
    *intent = 1;
    /* Critical sections last about a microsecond: spin briefly before giving up to the
     * slow path, whose blocking wait costs a context switch. */
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

static void drop_lock(FastAppend *self, Py_ssize_t index, sem_t *sem) {
    char *buf = (char *)self->view.buf;
    char *owner = buf + self->locks_at + index * self->lock_stride;
    wr32(owner + self->lock_owner_slot, (uint32_t)-1);
    wr32(owner + self->lock_owner_pid, 0);
    wr64(owner + self->lock_owner_start, 0);
    sem_post(sem);
    buf[self->intent_at0 + index] = 0;
}

/* A record's bytes before its tail: length, attributes, timestamp delta, offset delta. */
static int record_head(unsigned char *out, int64_t timestamp_delta, uint32_t offset_delta,
                       Py_ssize_t tail_len) {
    unsigned char deltas[21];
    int d = put_varlong(deltas, timestamp_delta);
    d += put_varlong(deltas + d, (int64_t)offset_delta);
    int n = put_varlong(out, 1 + d + tail_len);
    out[n++] = 0; /* attributes */
    memcpy(out + n, deltas, (size_t)d);
    return n + d;
}

static void copy_record(char *dst, const unsigned char *head, int n, const Piece *pieces,
                        int n_pieces) {
    memcpy(dst, head, (size_t)n);
    dst += n;
    for (int i = 0; i < n_pieces; i++) {
        memcpy(dst, pieces[i].ptr, (size_t)pieces[i].len);
        dst += pieces[i].len;
    }
}

/* Append to the last batch of the deque if it is OPEN and has room (stripe lock held). */
static int append_to_last(FastAppend *self, char *deque, int64_t timestamp, int64_t now_ms,
                          const Piece *pieces, int n_pieces, Py_ssize_t tail_len, Hit *hit) {
    char *buf = (char *)self->view.buf;
    uint64_t head = rd64(deque + self->d_head), tail_index = rd64(deque + self->d_tail);
    if (head == tail_index) return NEEDS_NEW_BATCH;
    if (tail_index < head || tail_index - head > (uint64_t)self->deque_capacity)
        return NEEDS_NEW_BATCH; /* damaged ends: the Sender quarantines the deque */
    uint64_t last = (tail_index - 1) % (uint64_t)self->deque_capacity;
    uint32_t batch_id = rd32(deque + self->d_ring + self->d_entry_size * last);
    if (batch_id >= (uint32_t)self->num_slabs) return NEEDS_NEW_BATCH; /* a damaged ring */
    char *batch = buf + self->batches_at + (Py_ssize_t)batch_id * self->batch_stride;
    if (rd32(batch + self->b_state) != (uint32_t)self->open_state) return NEEDS_NEW_BATCH;
    uint32_t first_slab = rd32(batch + self->b_first_slab);
    uint32_t slab_count = rd32(batch + self->b_slab_count);
    uint32_t write_pos = rd32(batch + self->b_write_pos);
    uint32_t count = rd32(batch + self->b_record_count);
    int64_t max_ts = (int64_t)rd64(batch + self->b_max_ts);
    int64_t base_ts = (int64_t)rd64(batch + self->b_base_ts);
    unsigned char head_bytes[32];
    int n = record_head(head_bytes, timestamp - base_ts, count, tail_len);
    int64_t end = (int64_t)write_pos + n + tail_len;
    int64_t capacity = (int64_t)slab_count * self->batch_size;
    if (end > capacity) return NEEDS_NEW_BATCH;
    copy_record(buf + self->slabs_at + (Py_ssize_t)first_slab * self->batch_size + write_pos,
                head_bytes, n, pieces, n_pieces);
    char *bits = batch + self->b_appenders + (self->slot >> 3);
    unsigned char bit = (unsigned char)(1u << (self->slot & 7));
    if (!(*bits & bit)) *bits |= bit;
    /* publish last: the times, then write_pos | count << 32 in one aligned 8-byte store
     * (layout.py), so a process killed at any instruction leaves no partial record */
    uint32_t new_count = count + 1;
    int64_t new_max = timestamp > max_ts ? timestamp : max_ts;
    wr64(batch + self->b_max_ts, (uint64_t)new_max);
    wr64(batch + self->b_last_append, (uint64_t)now_ms);
    store_release64(batch + self->b_publish, (uint64_t)(uint32_t)end | (uint64_t)new_count << 32);
    hit->batch_id = batch_id;
    hit->generation = rd32(batch + self->b_generation);
    hit->offset_delta = count;
    hit->full = (capacity - end) < (n + tail_len);
    hit->queued = tail_index - head;
    hit->new_batch = 0;
    hit->wake = hit->full;
    return APPENDED;
}

/* Take one free slab as BufferPool.allocate does in its common case (nobody queued for
 * memory, a free slab, nothing pending in our slot), recording it as pending in our slot
 * first. Returns the slab, or -1 (Python allocates: it may wait, queue or take a run). */
static Py_ssize_t take_slab(FastAppend *self) {
    char *buf = (char *)self->view.buf;
    if (rd32(buf + self->pending_first_at) != (uint32_t)self->no_slab)
        return -1; /* another thread of ours is allocating */
    if (!take_lock(self, self->pool_lock, self->pool_sem)) return -1;
    Py_ssize_t slab = -1;
    if (rd64(buf + self->waitq_head_at) == rd64(buf + self->waitq_tail_at)) {
        char *freemap = buf + self->freemap_at;
        char *free_at = memchr(freemap, 0, (size_t)self->num_slabs);
        if (free_at) {
            slab = free_at - freemap;
            wr32(buf + self->pending_first_at, (uint32_t)slab);
            wr32(buf + self->pending_count_at, 1);
            *free_at = 1;
        }
    }
    drop_lock(self, self->pool_lock, self->pool_sem);
    return slab;
}

/* A new batch needs the Sender's attention within linger.ms. Skip the wake (a semaphore
 * post, two context switches) when the Sender will look in time by itself: it is looking
 * now (wake_at 0; it re-reads new_batches before it sleeps), or it sleeps until no later
 * than now + linger. The counter store and the wake_at load are ordered by a full fence,
 * as the Sender orders its wake_at store and counter load (Dekker-style). */
static int sender_needs_wake(FastAppend *self, int64_t now_ms) {
    char *buf = (char *)self->view.buf;
    /* atomic across processes: the counter only grows, so any change is seen */
    __atomic_add_fetch((uint64_t *)(buf + self->new_batches_at), 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int64_t wake_at = (int64_t)rd64(buf + self->sender_wake_at);
    int64_t linger = (int64_t)rd64(buf + self->sender_linger_at);
    return wake_at != 0 && wake_at > now_ms + linger;
}

/* Open a batch on a fresh slab holding this one record and queue it on the deque (stripe
 * lock held), in RecordAccumulator._open_batch's order: descriptor and record first, then
 * the deque push that publishes the batch, then the pending record is cleared. */
static int open_batch(FastAppend *self, char *deque, Py_ssize_t deque_id, int64_t timestamp,
                      int64_t now_ms, const Piece *pieces, int n_pieces, Py_ssize_t tail_len,
                      Hit *hit) {
    char *buf = (char *)self->view.buf;
    uint64_t head = rd64(deque + self->d_head), tail_index = rd64(deque + self->d_tail);
    if (tail_index - head >= (uint64_t)self->deque_capacity) return NEEDS_NEW_BATCH;
    unsigned char head_bytes[32];
    int n = record_head(head_bytes, 0, 0, tail_len);
    int64_t end = self->record_batch_header + n + tail_len;
    if (end > self->batch_size) return NEEDS_NEW_BATCH; /* a multi-slab run: Python's job */
    Py_ssize_t slab = take_slab(self);
    if (slab < 0) return NEEDS_NEW_BATCH;
    copy_record(buf + self->slabs_at + slab * self->batch_size + self->record_batch_header,
                head_bytes, n, pieces, n_pieces);
    char *batch = buf + self->batches_at + slab * self->batch_stride;
    uint32_t generation = rd32(batch + self->b_generation) + 1;
    wr32(batch + self->b_generation, generation);
    wr32(batch + self->b_deque, (uint32_t)deque_id);
    wr32(batch + self->b_first_slab, (uint32_t)slab);
    wr32(batch + self->b_slab_count, 1);
    wr32(batch + self->b_attempts, 0);
    wr32(batch + self->b_write_pos, (uint32_t)end);
    wr32(batch + self->b_record_count, 1);
    wr64(batch + self->b_max_ts, (uint64_t)timestamp);
    wr64(batch + self->b_last_append, (uint64_t)now_ms);
    wr64(batch + self->b_base_ts, (uint64_t)timestamp);
    wr64(batch + self->b_created, (uint64_t)now_ms);
    wr64(batch + self->b_producer_id, (uint64_t)-1);
    int16_t no_epoch = -1;
    memcpy(batch + self->b_producer_epoch, &no_epoch, 2);
    wr32(batch + self->b_base_sequence, (uint32_t)-1);
    memset(batch + self->b_appenders, 0, (size_t)self->appenders_size);
    batch[self->b_appenders + (self->slot >> 3)] = (char)(1u << (self->slot & 7));
    wr32(batch + self->b_parent, (uint32_t)self->no_parent);
    wr32(batch + self->b_parent_generation, 0);
    wr32(batch + self->b_parent_delta, 0);
    /* last: the descriptor is whole */
    store_release32(batch + self->b_state, (uint32_t)self->open_state);
    wr32(deque + self->d_ring + self->d_entry_size * (tail_index % self->deque_capacity),
         (uint32_t)slab);
    store_release64(deque + self->d_tail, tail_index + 1); /* publish: the batch is queued */
    /* committed: the batch owns the slab */
    wr32(buf + self->pending_first_at, (uint32_t)self->no_slab);
    wr32(buf + self->pending_count_at, 0);
    hit->batch_id = (uint32_t)slab;
    hit->generation = generation;
    hit->offset_delta = 0;
    hit->full = (self->batch_size - end) < (n + tail_len);
    hit->queued = tail_index + 1 - head;
    hit->new_batch = 1;
    hit->wake = hit->full || sender_needs_wake(self, now_ms);
    return APPENDED;
}

/* The fast path proper: lock the stripe, append one record whose part after the offset
 * delta is the concatenation of ``pieces`` (opening a batch for it when ``may_open`` and
 * the last one has no room), publish, unlock. Returns APPENDED with ``hit`` filled, or
 * BUSY / NEEDS_NEW_BATCH when Python must take the slow path. */
static int fast_append(FastAppend *self, Py_ssize_t deque_id, int64_t timestamp,
                       int64_t now_ms, const Piece *pieces, int n_pieces, int may_open,
                       Hit *hit) {
    Py_ssize_t tail_len = 0;
    for (int i = 0; i < n_pieces; i++) tail_len += pieces[i].len;
    Py_ssize_t stripe = deque_id % self->n_sems;
    Py_ssize_t lock = self->first_stripe + stripe;
    if (!take_lock(self, lock, self->sems[stripe])) return BUSY;
    char *deque = (char *)self->view.buf + self->deques_at + deque_id * self->deque_size;
    int result = append_to_last(self, deque, timestamp, now_ms, pieces, n_pieces, tail_len, hit);
    if (result == NEEDS_NEW_BATCH && may_open)
        result = open_batch(self, deque, deque_id, timestamp, now_ms, pieces, n_pieces, tail_len, hit);
    drop_lock(self, lock, self->sems[stripe]);
    return result;
}

static PyObject *hit_tuple(int appended, const Hit *hit) {
    if (appended != APPENDED) Py_RETURN_NONE;
    return Py_BuildValue("(IIIiK)", hit->batch_id, hit->generation, hit->offset_delta, hit->full,
                         (unsigned long long)hit->queued);
}


/* append(deque_id, timestamp_ms, tail, now_ms): tail = key, value and headers, encoded.
 *   -> (batch_id, generation, offset_delta, batch_is_full, queued) or None (slow path) */
static PyObject *FastAppend_append(FastAppend *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "append takes 4 arguments");
    if (!self->has_view) return PyErr_Format(PyExc_ValueError, "closed");
    Py_ssize_t deque_id = PyLong_AsSsize_t(args[0]);
    int64_t timestamp = PyLong_AsLongLong(args[1]);
    int64_t now_ms = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    Piece piece;
    if (PyBytes_AsStringAndSize(args[2], (char **)&piece.ptr, &piece.len) < 0) return NULL;
    Hit hit;
    return hit_tuple(fast_append(self, deque_id, timestamp, now_ms, &piece, 1, 0, &hit), &hit);
}

/* Append a record without headers: its key and value (bytes or None) encoded here. */
static int append_kv(FastAppend *self, Py_ssize_t deque_id, int64_t timestamp, int64_t now_ms,
                     PyObject *key, PyObject *value, int may_open, Hit *hit) {
    unsigned char key_len[10], value_len[10];
    static const char no_headers = 0;
    Piece pieces[5];
    int n = 0;
    PyObject *fields[2] = {key, value};
    unsigned char *lens[2] = {key_len, value_len};
    for (int i = 0; i < 2; i++) {
        if (fields[i] == Py_None) {
            pieces[n].ptr = (const char *)lens[i];
            pieces[n++].len = put_varlong(lens[i], -1);
            continue;
        }
        char *data;
        Py_ssize_t size;
        if (PyBytes_AsStringAndSize(fields[i], &data, &size) < 0) return -1;
        pieces[n].ptr = (const char *)lens[i];
        pieces[n++].len = put_varlong(lens[i], size);
        pieces[n].ptr = data;
        pieces[n++].len = size;
    }
    pieces[n].ptr = &no_headers;
    pieces[n++].len = 1;
    return fast_append(self, deque_id, timestamp, now_ms, pieces, n, may_open, hit);
}

/* append_kv(deque_id, timestamp_ms, key, value, now_ms): a record without headers. Same
 * result as append. */
static PyObject *FastAppend_append_kv(FastAppend *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "append_kv takes 5 arguments");
    if (!self->has_view) return PyErr_Format(PyExc_ValueError, "closed");
    Py_ssize_t deque_id = PyLong_AsSsize_t(args[0]);
    int64_t timestamp = PyLong_AsLongLong(args[1]);
    int64_t now_ms = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    Hit hit;
    int appended = append_kv(self, deque_id, timestamp, now_ms, args[2], args[3], 0, &hit);
    if (appended < 0) return NULL;
    return hit_tuple(appended, &hit);
}

/* Kafka's murmur2 (the Java client's Utils.murmur2: seed 0x9747b28c, 4-byte little-endian
 * words, the tail folded in from its last byte down), as protocol/hashing.py computes it. */
static uint32_t murmur2(const unsigned char *data, Py_ssize_t length) {
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
    case 3: h ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: h ^= tail[0]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static int64_t clock_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* send_kv(route, partition, key, value): the whole of ProducerHandle.send for a record
 * without headers or explicit timestamp. route = (directory_version, deque_ids) as the
 * caller last read the directory; partition -1 = murmur2(key) % partitions (key required).
 *   -> ((batch_id << 32) | generation, flags (1: batch full, 2: new batch, 4: wake the
 *       Sender), partition,
 *       offset_delta, timestamp,
 *       key_size, value_size): handle.py's RecordFacts; an int: that partition needs a new
 *       batch (nothing was written);
 *       None: the directory moved, the stripe is busy, or the input needs the Python path. */
static PyObject *FastAppend_send_kv(FastAppend *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "send_kv takes 4 arguments");
    if (!self->has_view) return PyErr_Format(PyExc_ValueError, "closed");
    PyObject *route = args[0], *key = args[2], *value = args[3];
    if (!PyTuple_CheckExact(route) || PyTuple_GET_SIZE(route) != 2)
        return PyErr_Format(PyExc_TypeError, "route must be (version, deque_ids)");
    uint64_t version = (uint64_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(route, 0));
    PyObject *deques = PyTuple_GET_ITEM(route, 1);
    Py_ssize_t partition = PyLong_AsSsize_t(args[1]);
    if (PyErr_Occurred()) return NULL;
    if (!PyTuple_CheckExact(deques) || PyTuple_GET_SIZE(deques) == 0)
        return PyErr_Format(PyExc_TypeError, "deque_ids must be a non-empty tuple");
    if (rd64((const char *)self->view.buf + self->directory_version_at) != version) Py_RETURN_NONE;
    if ((key != Py_None && !PyBytes_CheckExact(key)) || (value != Py_None && !PyBytes_CheckExact(value)))
        Py_RETURN_NONE;
    Py_ssize_t count = PyTuple_GET_SIZE(deques);
    if (partition < 0) {
        if (key == Py_None) Py_RETURN_NONE;
        uint32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        partition = (Py_ssize_t)((h & 0x7fffffffu) % (uint32_t)count);
    } else if (partition >= count) {
        Py_RETURN_NONE;
    }
    Py_ssize_t deque_id = PyLong_AsSsize_t(PyTuple_GET_ITEM(deques, partition));
    if (PyErr_Occurred()) return NULL;
    int64_t timestamp = clock_ms(CLOCK_REALTIME);
    int64_t now_ms = clock_ms(CLOCK_MONOTONIC); /* = time.monotonic() on Linux */
    Hit hit;
    int appended = append_kv(self, deque_id, timestamp, now_ms, key, value, 1, &hit);
    if (appended < 0) return NULL;
    if (appended == NEEDS_NEW_BATCH) return PyLong_FromSsize_t(partition);
    if (appended == BUSY) Py_RETURN_NONE;
    Py_ssize_t key_size = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
    Py_ssize_t value_size = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
    return Py_BuildValue("(KinILnn)", ((unsigned long long)hit.batch_id << 32) | hit.generation,
                         hit.full | (hit.new_batch << 1) | (hit.wake << 2), partition,
                         hit.offset_delta,
                         (long long)timestamp, key_size, value_size);
}

static PyObject *full_fence(PyObject *module, PyObject *unused) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

/* offsets() -> the memory map this object was given: {layout key: value}. */
static PyObject *FastAppend_offsets(FastAppend *self, PyObject *unused) {
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (size_t i = 0; i < N_LAYOUT_FIELDS; i++) {
        PyObject *value = PyLong_FromSsize_t(*layout_field(self, i));
        if (!value || PyDict_SetItemString(out, layout_fields[i].key, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(value);
    }
    return out;
}

static PyObject *FastAppend_close(FastAppend *self, PyObject *unused) {
    FastAppend_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef FastAppend_methods[] = {
    {"append", (PyCFunction)(void (*)(void))FastAppend_append, METH_FASTCALL,
     "append(deque_id, timestamp_ms, tail, now_ms) -> tuple or None"},
    {"append_kv", (PyCFunction)(void (*)(void))FastAppend_append_kv, METH_FASTCALL,
     "append_kv(deque_id, timestamp_ms, key, value, now_ms) -> tuple or None"},
    {"send_kv", (PyCFunction)(void (*)(void))FastAppend_send_kv, METH_FASTCALL,
     "send_kv(route, partition, key, value) -> (registration, wake, record) or None"},
    {"offsets", (PyCFunction)FastAppend_offsets, METH_NOARGS,
     "offsets() -> the memory map given at initialisation (Layout.fast_path_offsets)"},
    {"close", (PyCFunction)FastAppend_close, METH_NOARGS, "release the buffer and semaphores"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastAppendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmkafka.producer._fastappend.FastAppend",
    .tp_basicsize = sizeof(FastAppend),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FastAppend_init,
    .tp_dealloc = (destructor)FastAppend_dealloc,
    .tp_methods = FastAppend_methods,
    .tp_doc = "The append fast path over a pool segment (see accumulator.py).",
};

static PyMethodDef module_methods[] = {
    {"full_fence", (PyCFunction)full_fence, METH_NOARGS,
     "a full memory fence (the Sender's side of the new-batch wake protocol)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastappend", "The accumulator's append fast path in C.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__fastappend(void) {
    if (PyType_Ready(&FastAppendType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&FastAppendType);
    if (PyModule_AddObject(m, "FastAppend", (PyObject *)&FastAppendType) < 0) {
        Py_DECREF(&FastAppendType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
