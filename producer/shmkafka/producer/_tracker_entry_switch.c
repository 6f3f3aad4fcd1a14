/*
 * Turning a facade's C entry on and off: _fast_enable binds it to a client's
 * tracker and append (Client.bind_entry), _fast_guard sends every record to
 * the Python path once a word of shared memory changes (a fenced
 * transactional producer), _fast_disable unbinds it, and a fork turns it off
 * in the child (fork_generation). Part of the _tracker extension
 * (_tracker_internal.h).
 *
 * The style is CPython's (PEP 7).
 */
#include "_tracker_internal.h"

int
Entry_traverse(Entry *self, visitproc visit, void *arg)
{
    Py_VISIT(self->tracker);
    Py_VISIT(self->fast);
    Py_VISIT(self->routes);
    Py_VISIT(self->on_delivery);
    Py_VISIT(self->reports);
    Py_VISIT(self->unassigned);
    return 0;
}

int
Entry_clear(Entry *self)
{
    Py_CLEAR(self->tracker);
    Py_CLEAR(self->fast);
    Py_CLEAR(self->routes);
    Py_CLEAR(self->on_delivery);
    Py_CLEAR(self->reports);
    Py_CLEAR(self->unassigned);
    return 0;
}

void
Entry_dealloc(Entry *self)
{
    PyObject_GC_UnTrack(self);
    Entry_clear(self);
    self->guard = NULL;
    Py_CLEAR(self->guard_owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

const char Entry_fast_enable__doc__[] = PyDoc_STR(
"_fast_enable($self, tracker, fast, routes, size_precheck, partitioner,\n"
"             on_delivery, reports, unassigned, max_messages, /)\n"
"--\n"
"\n"
"Take the common record here, through the client's C Tracker and\n"
"FastAppend and its route cache; records of size_precheck bytes or more\n"
"take the Python path. partitioner: 1 murmur2, 2 crc32 (librdkafka's\n"
"consistent_random), else the Python path for keyed records. The last\n"
"four are produce()'s (None / 0 for send()).");

PyObject *
Entry_fast_enable(Entry *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError,
                     "_fast_enable() takes exactly 9 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &TrackerType)
        || !PyObject_TypeCheck(args[1], append_api->fast_append_type)
        || !PyDict_CheckExact(args[2]))
    {
        PyErr_SetString(PyExc_TypeError,
                        "_fast_enable() needs a Tracker, a FastAppend and a "
                        "dict of routes");
        return NULL;
    }
    Py_ssize_t size_precheck = PyLong_AsSsize_t(args[3]);
    long partitioner = PyLong_AsLong(args[4]);
    Py_ssize_t max_messages = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Entry_clear(self);
    self->tracker = Py_NewRef(args[0]);
    self->fast = Py_NewRef(args[1]);
    self->routes = Py_NewRef(args[2]);
    self->on_delivery = Py_NewRef(args[5]);
    self->reports = args[6] == Py_None ? NULL : Py_NewRef(args[6]);
    self->unassigned = args[7] == Py_None ? NULL : Py_NewRef(args[7]);
    self->size_precheck = size_precheck;
    self->partitioner = (int)partitioner;
    self->max_messages = max_messages;
    self->generation = fork_generation;
    Py_RETURN_NONE;
}

const char Entry_fast_guard__doc__[] = PyDoc_STR(
"_fast_guard($self, buffer, offset, expected, /)\n"
"--\n"
"\n"
"The C path takes a record only while the little-endian u32 at offset of\n"
"buffer (a writable buffer: shared memory) equals expected; buffer None:\n"
"no guard.");

PyObject *
Entry_fast_guard(Entry *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError,
                     "_fast_guard() takes exactly 3 arguments (%zd given)", nargs);
        return NULL;
    }
    self->guard = NULL;
    Py_CLEAR(self->guard_owner);
    if (args[0] == Py_None) {
        Py_RETURN_NONE;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    unsigned long expected = PyLong_AsUnsignedLong(args[2]);
    if (expected == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    /* The pointer is kept after the view is released. It stays valid while the
     * C path is on: the facade turns it off (_fast_disable) before its client
     * unmaps the pool, and a guarded record is checked after ``tracker``. */
    char *base = (char *)view.buf;
    Py_ssize_t length = view.len;
    PyBuffer_Release(&view);
    if (offset < 0 || offset % 4 != 0 || offset + 4 > length) {
        PyErr_SetString(PyExc_ValueError, "_fast_guard(): offset out of the buffer");
        return NULL;
    }
    self->guard_owner = Py_NewRef(args[0]);
    self->guard = (volatile const uint32_t *)(base + offset);
    self->guard_value = (uint32_t)expected;
    Py_RETURN_NONE;
}

PyObject *
Entry_fast_disable(Entry *self, PyObject *Py_UNUSED(ignored))
{
    Entry_clear(self);
    Py_RETURN_NONE;
}

PyObject *
Entry_fast_enabled(Entry *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(self->tracker != NULL
                           && self->generation == fork_generation);
}
