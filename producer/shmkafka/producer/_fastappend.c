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
    /* layout */
    Py_ssize_t deques_at, deque_size, deque_capacity, deque_ring_at;
    Py_ssize_t batches_at, batch_stride, slabs_at, batch_size;
    Py_ssize_t b_state, b_generation, b_first_slab, b_slab_count, b_publish, b_base_ts, b_appenders;
    Py_ssize_t owner_at0, lock_stride, first_stripe, intent_at0, directory_version_at;
    uint32_t open_state;
    int32_t slot, pid;
    int64_t started;
} FastAppend;

static inline uint32_t rd32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void wr32(char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void wr64(char *p, uint64_t v) { memcpy(p, &v, 8); }

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
    if (!PyArg_ParseTuple(args, "OO!O!", &buffer, &PyList_Type, &names, &PyDict_Type, &layout))
        return -1;
    if (PyObject_GetBuffer(buffer, &self->view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) return -1;
    self->has_view = 1;
    struct { const char *key; Py_ssize_t *out; } fields[] = {
        {"deques_at", &self->deques_at}, {"deque_size", &self->deque_size},
        {"deque_capacity", &self->deque_capacity}, {"deque_ring_at", &self->deque_ring_at},
        {"batches_at", &self->batches_at}, {"batch_stride", &self->batch_stride},
        {"slabs_at", &self->slabs_at}, {"batch_size", &self->batch_size},
        {"b_state", &self->b_state}, {"b_generation", &self->b_generation},
        {"b_first_slab", &self->b_first_slab}, {"b_slab_count", &self->b_slab_count},
        {"b_publish", &self->b_publish}, {"b_base_ts", &self->b_base_ts},
        {"b_appenders", &self->b_appenders}, {"owner_at0", &self->owner_at0},
        {"lock_stride", &self->lock_stride}, {"first_stripe", &self->first_stripe},
        {"intent_at0", &self->intent_at0}, {"directory_version_at", &self->directory_version_at},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (get_ssize(layout, fields[i].key, fields[i].out) < 0) return -1;
    Py_ssize_t open_state, slot, pid, started;
    if (get_ssize(layout, "open_state", &open_state) < 0 || get_ssize(layout, "slot", &slot) < 0 ||
        get_ssize(layout, "pid", &pid) < 0 || get_ssize(layout, "started", &started) < 0)
        return -1;
    self->open_state = (uint32_t)open_state;
    self->slot = (int32_t)slot;
    self->pid = (int32_t)pid;
    self->started = (int64_t)started;
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

typedef struct {
    uint32_t batch_id, generation, offset_delta;
    int full;
    uint64_t queued;
} Hit;

/* The fast path proper: lock the stripe, append one record whose part after the offset
 * delta is the concatenation of ``pieces``, publish, unlock. Returns 1 with ``hit`` filled,
 * or 0 when Python must take the slow path. */
static int fast_append(FastAppend *self, Py_ssize_t deque_id, int64_t timestamp,
                       int64_t now_ms, const Piece *pieces, int n_pieces, Hit *hit) {
    Py_ssize_t tail_len = 0;
    for (int i = 0; i < n_pieces; i++) tail_len += pieces[i].len;
    char *buf = (char *)self->view.buf;
    Py_ssize_t stripe = deque_id % self->n_sems;
    char *intent = buf + self->intent_at0 + self->first_stripe + stripe;
    char *owner = buf + self->owner_at0 + (self->first_stripe + stripe) * self->lock_stride;
    if (*intent) return 0; /* another thread of this process holds or wants it */
    *intent = 1;
    /* The critical section lasts about a microsecond: spin briefly before giving up to the
     * slow path, whose blocking wait costs a context switch. */
    int taken = 0;
    for (int spin = 0; spin < SPIN_TRIES; spin++) {
        if (sem_trywait(self->sems[stripe]) == 0) {
            taken = 1;
            break;
        }
        cpu_relax();
    }
    if (!taken) {
        *intent = 0;
        return 0;
    }
    wr32(owner, (uint32_t)self->slot);
    wr32(owner + 4, (uint32_t)self->pid);
    wr64(owner + 8, (uint64_t)self->started);

    int appended = 0;
    char *deque = buf + self->deques_at + deque_id * self->deque_size;
    uint64_t head = rd64(deque), tail_index = rd64(deque + 8);
    if (head != tail_index) {
        uint32_t batch_id = rd32(deque + self->deque_ring_at + 4 * ((tail_index - 1) % self->deque_capacity));
        char *batch = buf + self->batches_at + (Py_ssize_t)batch_id * self->batch_stride;
        if (rd32(batch + self->b_state) == self->open_state) {
            uint32_t generation = rd32(batch + self->b_generation);
            uint32_t first_slab = rd32(batch + self->b_first_slab);
            uint32_t slab_count = rd32(batch + self->b_slab_count);
            char *publish = batch + self->b_publish;
            uint32_t write_pos = rd32(publish), count = rd32(publish + 4);
            int64_t max_ts = (int64_t)rd64(publish + 8);
            int64_t base_ts = (int64_t)rd64(batch + self->b_base_ts);
            unsigned char head_bytes[32];
            int n = 1; /* attributes */
            unsigned char deltas[21];
            int d = put_varlong(deltas, timestamp - base_ts);
            d += put_varlong(deltas + d, (int64_t)count);
            int64_t body = 1 + d + tail_len;  /* tail_len: the pieces' total */
            n = put_varlong(head_bytes, body);
            head_bytes[n++] = 0;
            memcpy(head_bytes + n, deltas, (size_t)d);
            n += d;
            int64_t end = (int64_t)write_pos + n + tail_len;
            int64_t capacity = (int64_t)slab_count * self->batch_size;
            if (end <= capacity) {
                char *dst = buf + self->slabs_at + (Py_ssize_t)first_slab * self->batch_size + write_pos;
                memcpy(dst, head_bytes, (size_t)n);
                char *at = dst + n;
                for (int i = 0; i < n_pieces; i++) {
                    memcpy(at, pieces[i].ptr, (size_t)pieces[i].len);
                    at += pieces[i].len;
                }
                char *bits = batch + self->b_appenders + (self->slot >> 3);
                unsigned char bit = (unsigned char)(1u << (self->slot & 7));
                if (!(*bits & bit)) *bits |= bit;
                /* publish last */
                unsigned char pub[24];
                uint32_t new_count = count + 1;
                int64_t new_max = timestamp > max_ts ? timestamp : max_ts;
                memcpy(pub, &end, 4); /* little-endian low 32 bits */
                memcpy(pub + 4, &new_count, 4);
                memcpy(pub + 8, &new_max, 8);
                memcpy(pub + 16, &now_ms, 8);
                memcpy(publish, pub, 24);
                int full = (capacity - end) < (n + tail_len);
                hit->batch_id = batch_id;
                hit->generation = generation;
                hit->offset_delta = count;
                hit->full = full;
                hit->queued = tail_index - head;
                appended = 1;
            }
        }
    }
    wr32(owner, (uint32_t)-1);
    wr32(owner + 4, 0);
    wr64(owner + 8, 0);
    sem_post(self->sems[stripe]);
    *intent = 0;
    return appended;
}

static PyObject *hit_tuple(int appended, const Hit *hit) {
    if (!appended) Py_RETURN_NONE;
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
    return hit_tuple(fast_append(self, deque_id, timestamp, now_ms, &piece, 1, &hit), &hit);
}

/* Append a record without headers: its key and value (bytes or None) encoded here. */
static int append_kv(FastAppend *self, Py_ssize_t deque_id, int64_t timestamp, int64_t now_ms,
                     PyObject *key, PyObject *value, Hit *hit) {
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
    return fast_append(self, deque_id, timestamp, now_ms, pieces, n, hit);
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
    int appended = append_kv(self, deque_id, timestamp, now_ms, args[2], args[3], &hit);
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
 *   -> ((batch_id << 32) | generation, wake_sender, (partition, offset_delta, timestamp,
 *       key_size, value_size)), or None: the directory moved, or the slow path is needed. */
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
    int appended = append_kv(self, deque_id, timestamp, now_ms, key, value, &hit);
    if (appended <= 0) {
        if (appended < 0) return NULL;
        Py_RETURN_NONE;
    }
    Py_ssize_t key_size = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
    Py_ssize_t value_size = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
    return Py_BuildValue("(KO(nILnn))", ((unsigned long long)hit.batch_id << 32) | hit.generation,
                         (hit.full || hit.queued > 1) ? Py_True : Py_False, partition, hit.offset_delta,
                         (long long)timestamp, key_size, value_size);
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

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastappend", "The accumulator's append fast path in C.", -1, NULL,
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
