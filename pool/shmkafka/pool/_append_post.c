/*
 * The Sender's posting of one batch's result to the completion ring of every
 * process that appended to it: CompletionRings.post_to (shm/rings.py) is its
 * Python twin and the reference; RecordAccumulator.post_completion calls
 * this one where the C extension is built. Part of the _append extension
 * (_append_internal.h).
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
append_slot(PyObject *list, Py_ssize_t slot)
{
    PyObject *number = PyLong_FromSsize_t(slot);

    if (number == NULL) {
        return -1;
    }
    int rc = PyList_Append(list, number);
    Py_DECREF(number);
    return rc;
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
    const unsigned char *bits =
        (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const char *entry = PyBytes_AS_STRING(args[1]);
    /* the slots whose memory is reserved: one past the highest claimed */
    Py_ssize_t high = rd32((char *)self->view.buf + self->slots_high_at);
    high = high < self->max_processes ? high : self->max_processes;

    PyObject *posted = PyList_New(0), *full = PyList_New(0);
    if (posted == NULL || full == NULL) {
        goto error;
    }
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
            if (append_slot(list, slot) < 0) {
                goto error;
            }
        }
    }
    return Py_BuildValue("(NN)", posted, full);

error:
    Py_XDECREF(posted);
    Py_XDECREF(full);
    return NULL;
}
