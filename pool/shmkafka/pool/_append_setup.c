/*
 * The C append's construction (FastAppend.__init__, release, offsets) and the
 * checks of its arguments: the memory map it is given (fastpath.py's
 * fast_path_offsets), its lock semaphores. Part of the _append extension
 * (_append_internal.h).
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"


/*
 * The memory map's keys, each with the field it fills: exactly the keys of
 * fastpath.fast_path_offsets (FastAppend.offsets() returns them, and
 * tests/pool/test_fastpath_offsets.py compares both sides).
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
    LAYOUT_FIELD(b_recovered),
    LAYOUT_FIELD(free_state),
    LAYOUT_FIELD(open_state),
    LAYOUT_FIELD(sealed_state),
    LAYOUT_FIELD(in_flight_state),
    LAYOUT_FIELD(freemap_at),
    LAYOUT_FIELD(num_slabs),
    LAYOUT_FIELD(slabs_at),
    LAYOUT_FIELD(slab_size),
    LAYOUT_FIELD(max_run),
    LAYOUT_FIELD(batch_max_records),
    LAYOUT_FIELD(record_limit),
    LAYOUT_FIELD(slots_high_at),
    LAYOUT_FIELD(max_processes),
    LAYOUT_FIELD(slots_at),
    LAYOUT_FIELD(slot_size),
    LAYOUT_FIELD(s_ring_head),
    LAYOUT_FIELD(s_ring_tail),
    LAYOUT_FIELD(ring_at),
    LAYOUT_FIELD(ring_capacity),
    LAYOUT_FIELD(ring_entry_size),
};

#define N_LAYOUT_FIELDS Py_ARRAY_LENGTH(layout_fields)

static inline Py_ssize_t *
layout_field(FastAppend *self, size_t i)
{
    return (Py_ssize_t *)((char *)self + layout_fields[i].field);
}

/* ------------------------------------------------------------------------
 * Argument errors, worded as CPython words them.
 */

int
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

void
bad_argument(const char *fname, const char *name, const char *expected,
             PyObject *arg)
{
    PyErr_Format(PyExc_TypeError, "%s() argument '%s' must be %s, not %.50s",
                 fname, name, expected, Py_TYPE(arg)->tp_name);
}

/* An int argument that must fit a Py_ssize_t. */
inline int
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
inline int
int64_arg(const char *fname, const char *name, PyObject *arg, int64_t *out)
{
    if (!PyLong_Check(arg) && !PyIndex_Check(arg)) {
        bad_argument(fname, name, "int", arg);
        return -1;
    }
    *out = PyLong_AsLongLong(arg);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

inline int
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

void
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
    Py_CLEAR(self->lockdep);
    lz4_release(self);
}

void
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

/* FastAppend(buffer, semaphores, layout, pool_lock, lockdep=None). Runs once: a second
 * call would leak the first one's buffer view and semaphores, so it raises
 * RuntimeError and leaves the object as it was. A failed call releases what
 * it took. */
int
FastAppend_init(FastAppend *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer", "semaphores", "layout", "pool_lock",
                             "lockdep", NULL};
    PyObject *buffer, *names, *layout, *pool_lock, *lockdep = Py_None;

    if (self->initialized) {
        PyErr_SetString(PyExc_RuntimeError,
                        "FastAppend.__init__() called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|O:FastAppend", kwlist,
                                     &buffer, &names, &layout, &pool_lock,
                                     &lockdep))
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
    if (lockdep != Py_None) {
        Py_INCREF(lockdep);
        self->lockdep = lockdep;
    }
    self->initialized = 1;
    return 0;
}


PyObject *
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

/* A tuple of `type` (tuple, or a subclass: a NamedTuple) holding the n new
 * references in items, which it takes, also on failure; NULL when one of
 * them is NULL. What Py_BuildValue or tuple.__new__(type, items) make,
 * without parsing a format or calling into Python on every call. */
PyObject *
tuple_of(PyTypeObject *type, PyObject **items, Py_ssize_t n)
{
    PyObject *out = NULL;

    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] == NULL) {
            goto error;
        }
    }
    out = type == &PyTuple_Type ? PyTuple_New(n) : type->tp_alloc(type, n);
    if (out == NULL) {
        goto error;
    }
#if PY_VERSION_HEX >= 0x030E0000
    if (type != &PyTuple_Type) {
        /* a tuple caches its hash from 3.14 on; -1 is "not yet", and tp_alloc
         * zeroed it (tuple.__new__ sets it so) */
        ((PyTupleObject *)out)->ob_hash = -1;
    }
#endif
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(out, i, items[i]);
    }
    return out;

error:
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(items[i]);
    }
    return NULL;
}

/* list.append(item) of a new reference, which it takes, also on failure
 * (-1 with an exception set; an item of NULL is one already). */
int
append_new(PyObject *list, PyObject *item)
{
    if (item == NULL) {
        return -1;
    }
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}
