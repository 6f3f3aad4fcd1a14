/*
 * Tracker's other half: a completion resolves the records of its wait
 * (complete), and waits are listed (pending), forgotten once done (retire)
 * or all at once (clear). Part of the _tracker extension
 * (_tracker_internal.h); futures.py's PyTracker is the reference.
 *
 * The style is CPython's (PEP 7).
 */
#include "_tracker_internal.h"

/* Split ``wait``'s pending records at a completion of [first, last]: the
 * listed futures it covers are returned (new list), the rest stay. */
static PyObject *
resolve(Tracker *self, BatchWait *wait, uint32_t first, uint32_t last)
{
    PyObject *covered, *kept;
    Py_ssize_t resolved = 0;

    if (first == 0 && last == ALL_DELTAS) {
        if ((kept = PyList_New(0)) == NULL) {
            return NULL;
        }
        covered = wait->listed;
        wait->listed = kept;
        resolved = wait->n_deltas;
        wait->n_deltas = 0;
    }
    else {
        covered = PyList_New(0);
        kept = PyList_New(0);
        if (covered == NULL || kept == NULL) {
            Py_XDECREF(covered);
            Py_XDECREF(kept);
            return NULL;
        }
        Py_ssize_t n = PyList_GET_SIZE(wait->listed);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *future = PyList_GET_ITEM(wait->listed, i);
            uint32_t delta = ((FutureBase *)future)->offset_delta;
            if (PyList_Append(first <= delta && delta <= last ? covered : kept,
                              future) < 0)
            {
                Py_DECREF(covered);
                Py_DECREF(kept);
                return NULL;
            }
        }
        Py_SETREF(wait->listed, kept);
        Py_ssize_t left = 0;
        for (Py_ssize_t i = 0; i < wait->n_deltas; i++) {
            uint32_t delta = wait->deltas[i];
            if (first <= delta && delta <= last) {
                resolved++;
            }
            else {
                wait->deltas[left++] = delta;
            }
        }
        wait->n_deltas = left;
    }
    wait->pending -= resolved;
    self->outstanding -= resolved;
    return covered;
}

const char Tracker_complete__doc__[] = PyDoc_STR(
"complete($self, registration, first, last, completion, error, local,\n"
"         retire_at, /)\n"
"--\n"
"\n"
"Record a completion of deltas [first, last] (the caller holds cond);\n"
"the listed futures it resolves, or None when the same part came again\n"
"(from a Sender that restarted).");

PyObject *
Tracker_complete(Tracker *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t first, last;

    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError,
                     "complete() takes exactly 7 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    uint64_t registration = PyLong_AsUnsignedLongLong(args[0]);
    if ((registration == (uint64_t)-1 && PyErr_Occurred())
        || delta_arg(args[1], &first) < 0 || delta_arg(args[2], &last) < 0)
    {
        return NULL;
    }
    int local = PyObject_IsTrue(args[5]);
    double retire_at = PyFloat_AsDouble(args[6]);
    if (local < 0 || (retire_at == -1.0 && PyErr_Occurred())) {
        return NULL;
    }
    BatchWait *wait = wait_for(self, registration);
    PyObject *result = NULL;
    if (wait == NULL) {
        return NULL;
    }
    Py_INCREF(wait);  /* (held: packing the outcome may run Python code) */
    Py_ssize_t n = PyList_GET_SIZE(wait->completions);
    if (!local) {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (wait->ranges[2 * i] == first) {
                result = Py_NewRef(Py_None);
                goto done;
            }
        }
    }
    PyObject *item = PyTuple_Pack(2, args[3], args[4]);
    if (item == NULL) {
        goto done;
    }
    n = PyList_GET_SIZE(wait->completions);  /* (as it is now) */
    if (grow(&wait->ranges, &wait->cap_ranges, 2 * (n + 1)) < 0
        || PyList_Append(wait->completions, item) < 0)
    {
        Py_DECREF(item);
        goto done;
    }
    Py_DECREF(item);
    wait->ranges[2 * n] = first;
    wait->ranges[2 * n + 1] = last;
    wait->retire_at = retire_at;
    result = resolve(self, wait, first, last);
done:
    Py_DECREF(wait);
    return result;
}

PyObject *
Tracker_pending(Tracker *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0), *key, *value;
    Py_ssize_t pos = 0;

    if (out == NULL) {
        return NULL;
    }
    while (self->waits != NULL
           && PyDict_Next(self->waits, &pos, &key, &value))
    {
        Py_ssize_t pending = ((BatchWait *)value)->pending;
        if (pending == 0) {
            continue;
        }
        PyObject *item = Py_BuildValue("(On)", key, pending);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(item);
    }
    return out;
}

PyObject *
Tracker_retire(Tracker *self, PyObject *arg)
{
    double now = PyFloat_AsDouble(arg);
    PyObject *done, *key, *value;
    Py_ssize_t pos = 0;

    if ((now == -1.0 && PyErr_Occurred()) || (done = PyList_New(0)) == NULL) {
        return NULL;
    }
    while (self->waits != NULL
           && PyDict_Next(self->waits, &pos, &key, &value))
    {
        BatchWait *wait = (BatchWait *)value;
        if (wait->pending == 0 && PyList_GET_SIZE(wait->completions) > 0
            && wait->retire_at <= now && PyList_Append(done, key) < 0)
        {
            Py_DECREF(done);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(done); i++) {
        key = PyList_GET_ITEM(done, i);
        uint64_t registration = PyLong_AsUnsignedLongLong(key);
        CacheEntry *entry = &self->cache[(registration >> 32) % CACHE_SIZE];
        if (entry->wait != NULL && entry->registration == registration) {
            Py_CLEAR(entry->wait);
        }
        if (PyDict_DelItem(self->waits, key) < 0) {
            Py_DECREF(done);
            return NULL;
        }
    }
    Py_DECREF(done);
    Py_RETURN_NONE;
}

PyObject *
Tracker_clear(Tracker *self, PyObject *Py_UNUSED(ignored))
{
    clear_cache(self);
    if (self->waits != NULL) {
        PyDict_Clear(self->waits);
    }
    Py_RETURN_NONE;
}
