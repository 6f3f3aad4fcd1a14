/*
 * The completion rings' two sides.
 *
 * The Sender's posting of one batch's result to the completion ring of every
 * process that appended to it: CompletionRings.post_to (shm/rings.py) is its
 * Python twin and the reference; RecordAccumulator.post_completion calls
 * this one where the C extension is built.
 *
 * A process's reading of its own ring (take_results): CompletionRings.poll
 * is its Python twin and the reference; ProcessSlot.deliver calls this one,
 * which makes the results (rings.Completion, rings.SenderView) without a
 * Python call per entry, and leaves a damaged ring to poll, which skips it
 * (and names it).
 *
 * Part of the _append extension (_append_internal.h).
 *
 * The rings' rules are rings.py's: the Sender is a ring's one writer and
 * moves only its tail, after the entry (a release store: the reader that
 * sees the tail sees the entry); a full ring is left alone and named, for
 * the Sender to post again later. The entry comes packed (rings.ring_entry):
 * this code knows a ring entry's size, not its fields. The wakes stay with
 * the caller, who may gather them over a round (defer_wakes).
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"

/* One entry into the ring of `slot`; 0 if it is full. A head past the tail
 * (damaged) counts as room, as Python's tail - head >= capacity (unbounded
 * ints: negative) has it; so the full test is on a tail at or past the head. */
static int
post_one(FastAppend *self, Py_ssize_t slot, const char *entry)
{
    char *at = ((char *)self->view.buf + self->slots_at
                + slot * self->slot_size);
    uint64_t head = __atomic_load_n((uint64_t *)(void *)(at + self->s_ring_head),
                                    __ATOMIC_ACQUIRE);  /* the reader's */
    uint64_t tail = rd64(at + self->s_ring_tail);

    if (tail >= head && tail - head >= (uint64_t)self->ring_capacity) {
        return 0;
    }
    Py_ssize_t index = (Py_ssize_t)(tail % (uint64_t)self->ring_capacity);
    memcpy(at + self->ring_at + index * self->ring_entry_size, entry,
           (size_t)self->ring_entry_size);
    store_release64(at + self->s_ring_tail, tail + 1);  /* publish last */
    return 1;
}

static int
bytes_arg(const char *fname, const char *name, PyObject *arg,
          Py_ssize_t size)
{
    if (!PyBytes_Check(arg)) {
        bad_argument(fname, name, "bytes", arg);
        return -1;
    }
    if (PyBytes_GET_SIZE(arg) != size) {
        PyErr_Format(PyExc_ValueError, "%s(): '%s' is %zd bytes, not %zd",
                     fname, name, PyBytes_GET_SIZE(arg), size);
        return -1;
    }
    return 0;
}

/* The entry posted to the ring of every slot in the appender set `bits`
 * below the slots' high mark, lowest first: each slot appended to `posted`,
 * or to `full` if its ring was; -1 with an exception set. */
int
post_to_appenders(FastAppend *self, const unsigned char *bits,
                  const char *entry, PyObject *posted, PyObject *full)
{
    /* the slots whose memory is reserved: one past the highest claimed */
    Py_ssize_t high = rd32((char *)self->view.buf + self->slots_high_at);
    high = high < self->max_processes ? high : self->max_processes;

    for (Py_ssize_t byte = 0; byte * 8 < high && byte < self->appenders_size;
         byte++)
    {
        for (int bit = 0; bits[byte] >> bit; bit++) {
            Py_ssize_t slot = byte * 8 + bit;
            if (!(bits[byte] >> bit & 1)) {
                continue;
            }
            if (slot >= high) {
                break;
            }
            PyObject *list = post_one(self, slot, entry) ? posted : full;
            if (append_new(list, PyLong_FromSsize_t(slot)) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* FastAppend.post_result(appenders, entry): see _append.pyi. */
PyObject *
FastAppend_post_result(FastAppend *self, PyObject *const *args,
                       Py_ssize_t nargs)
{
    static const char fname[] = "post_result";

    if (check_open(self, fname) < 0 || check_nargs(fname, nargs, 2) < 0
        || bytes_arg(fname, "appenders", args[0], self->appenders_size) < 0
        || bytes_arg(fname, "entry", args[1], self->ring_entry_size) < 0)
    {
        return NULL;
    }
    PyObject *posted = PyList_New(0), *full = PyList_New(0);
    if (posted == NULL || full == NULL
        || post_to_appenders(self, (const unsigned char *)PyBytes_AS_STRING(
                                 args[0]), PyBytes_AS_STRING(args[1]),
                             posted, full) < 0)
    {
        goto error;
    }
    return Py_BuildValue("(NN)", posted, full);

error:
    Py_XDECREF(posted);
    Py_XDECREF(full);
    return NULL;
}

/* One entry as rings._completions makes it: Completion(batch, generation,
 * base, append, start, code, first, last, view), the view a SenderView of
 * (attempts, node, queued, request) if the batch was sent, else None. */
static PyObject *
completion_of(const char *e, PyTypeObject *completion, PyTypeObject *view)
{
    uint16_t attempts;
    int16_t code;
    PyObject *sent = Py_None;

    memcpy(&attempts, e + E_ATTEMPTS, sizeof(attempts));
    memcpy(&code, e + E_CODE, sizeof(code));
    if (attempts) {
        PyObject *fields[4] = {
            PyLong_FromLong(attempts),
            PyLong_FromLong((int32_t)rd32(e + E_NODE)),
            PyLong_FromLong((int32_t)rd32(e + E_QUEUED)),
            PyLong_FromLong((int32_t)rd32(e + E_REQUEST)),
        };
        sent = tuple_of(view, fields, 4);
        if (sent == NULL) {
            return NULL;
        }
    }
    else {
        Py_INCREF(sent);
    }
    PyObject *items[9] = {
        PyLong_FromUnsignedLong(rd32(e + E_BATCH)),
        PyLong_FromUnsignedLong(rd32(e + E_GENERATION)),
        PyLong_FromLongLong((int64_t)rd64(e + E_BASE)),
        PyLong_FromLongLong((int64_t)rd64(e + E_APPEND)),
        PyLong_FromLongLong((int64_t)rd64(e + E_START)),
        PyLong_FromLong(code),
        PyLong_FromUnsignedLong(rd32(e + E_FIRST)),
        PyLong_FromUnsignedLong(rd32(e + E_LAST)),
        sent,
    };
    return tuple_of(completion, items, 9);
}

static int
tuple_type_arg(const char *fname, const char *name, PyObject *arg)
{
    if (!PyType_Check(arg)
        || !PyType_IsSubtype((PyTypeObject *)arg, &PyTuple_Type))
    {
        bad_argument(fname, name, "a subclass of tuple", arg);
        return -1;
    }
    return 0;
}

/* FastAppend.take_results(slot, completion_type, view_type): see _append.pyi.
 * The ring's rules are rings.py's: the process is its one reader and moves
 * only its head; the tail is read first, with acquire (the entries before it
 * are written), and the head moved past what was read, with release (the
 * Sender may reuse those entries once it sees it). */
PyObject *
FastAppend_take_results(FastAppend *self, PyObject *const *args,
                        Py_ssize_t nargs)
{
    static const char fname[] = "take_results";
    Py_ssize_t slot;

    if (check_open(self, fname) < 0 || check_nargs(fname, nargs, 3) < 0
        || ssize_arg(fname, "slot", args[0], &slot) < 0
        || tuple_type_arg(fname, "completion_type", args[1]) < 0
        || tuple_type_arg(fname, "view_type", args[2]) < 0)
    {
        return NULL;
    }
    if (slot < 0 || slot >= self->max_processes) {
        PyErr_Format(PyExc_ValueError, "%s(): slot %zd is out of range",
                     fname, slot);
        return NULL;
    }
    if (self->ring_entry_size != ENTRY_SIZE) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): a ring entry is %zd bytes, not the %d read here",
                     fname, self->ring_entry_size, (int)ENTRY_SIZE);
        return NULL;
    }
    char *at = ((char *)self->view.buf + self->slots_at
                + slot * self->slot_size);
    uint64_t tail = __atomic_load_n((uint64_t *)(void *)(at + self->s_ring_tail),
                                    __ATOMIC_ACQUIRE);  /* the Sender's */
    uint64_t head = rd64(at + self->s_ring_head);  /* ours */
    uint64_t capacity = (uint64_t)self->ring_capacity;

    if (head == tail) {
        return PyList_New(0);
    }
    if (tail < head || tail - head > capacity) {
        Py_RETURN_NONE;  /* damaged: the Sender never overfills; poll skips it */
    }
    PyObject *out = PyList_New((Py_ssize_t)(tail - head));
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; head + (uint64_t)i < tail; i++) {
        uint64_t index = (head + (uint64_t)i) % capacity;
        PyObject *done = completion_of(
            at + self->ring_at + (Py_ssize_t)index * ENTRY_SIZE,
            (PyTypeObject *)args[1], (PyTypeObject *)args[2]);
        if (done == NULL) {
            Py_DECREF(out);
            return NULL;  /* the head unmoved: the entries stay to be read */
        }
        PyList_SET_ITEM(out, i, done);
    }
    store_release64(at + self->s_ring_head, tail);
    return out;
}
