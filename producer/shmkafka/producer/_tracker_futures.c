/*
 * The futures' C types: BatchWait, this process's records in one generation
 * of one batch, and Future, a record's facts and its batch's wait, whose
 * methods futures.py installs (adopt_methods). Part of the _tracker extension
 * (_tracker_internal.h); futures.py's BatchWait and Future are the reference.
 *
 * The style is CPython's (PEP 7).
 */
#include "_tracker_internal.h"

/* ------------------------------------------------------------------------
 * BatchWait: this process's records in one generation of one batch.
 */



int
grow(uint32_t **array, Py_ssize_t *cap, Py_ssize_t need)
{
    if (need <= *cap) {
        return 0;
    }
    Py_ssize_t new_cap = *cap ? *cap * 2 : 16;
    while (new_cap < need) {
        new_cap *= 2;
    }
    uint32_t *grown = PyMem_Realloc(*array, (size_t)new_cap * sizeof(**array));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *array = grown;
    *cap = new_cap;
    return 0;
}

BatchWait *
batchwait_new(PyObject *cond)
{
    BatchWait *wait = PyObject_GC_New(BatchWait, &BatchWaitType);

    if (wait == NULL) {
        return NULL;
    }
    wait->cond = Py_NewRef(cond);
    wait->completions = PyList_New(0);
    wait->listed = PyList_New(0);
    wait->ranges = wait->deltas = NULL;
    wait->cap_ranges = wait->n_deltas = wait->cap_deltas = 0;
    wait->pending = 0;
    wait->retire_at = 0.0;
    PyObject_GC_Track(wait);
    if (wait->completions == NULL || wait->listed == NULL) {
        Py_DECREF(wait);
        return NULL;
    }
    return wait;
}

static int
BatchWait_traverse(BatchWait *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cond);
    Py_VISIT(self->completions);
    Py_VISIT(self->listed);
    return 0;
}

static int
BatchWait_clear(BatchWait *self)
{
    Py_CLEAR(self->cond);
    Py_CLEAR(self->completions);
    Py_CLEAR(self->listed);
    return 0;
}

static void
BatchWait_dealloc(BatchWait *self)
{
    PyObject_GC_UnTrack(self);
    BatchWait_clear(self);
    PyMem_Free(self->ranges);
    PyMem_Free(self->deltas);
    PyObject_GC_Del(self);
}

/* The index of the completion covering ``delta``, or -1. */
Py_ssize_t
outcome_index(BatchWait *wait, uint32_t delta)
{
    if (wait->completions == NULL) {
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(wait->completions);

    for (Py_ssize_t i = 0; i < n; i++) {
        if (wait->ranges[2 * i] <= delta && delta <= wait->ranges[2 * i + 1]) {
            return i;
        }
    }
    return -1;
}

static PyObject *
outcome_of(BatchWait *wait, uint32_t delta)
{
    Py_ssize_t i = outcome_index(wait, delta);

    if (i < 0) {
        Py_RETURN_NONE;
    }
    return Py_NewRef(PyList_GET_ITEM(wait->completions, i));
}

int
delta_arg(PyObject *arg, uint32_t *out)
{
    unsigned long value = PyLong_AsUnsignedLong(arg);

    if (value == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (value > ALL_DELTAS) {
        PyErr_SetString(PyExc_OverflowError, "an offset delta is 32 bits");
        return -1;
    }
    *out = (uint32_t)value;
    return 0;
}

static PyObject *
BatchWait_outcome(BatchWait *self, PyObject *arg)
{
    uint32_t delta;

    if (delta_arg(arg, &delta) < 0) {
        return NULL;
    }
    return outcome_of(self, delta);
}


static PyObject *
BatchWait_listen(BatchWait *self, PyObject *future)
{
    if (!PyObject_TypeCheck(future, &FutureBaseType)) {
        PyErr_Format(PyExc_TypeError, "listen() needs a Future, not %.50s",
                     Py_TYPE(future)->tp_name);
        return NULL;
    }
    if (outcome_index(self, ((FutureBase *)future)->offset_delta) >= 0) {
        Py_RETURN_FALSE;
    }
    int listed = PySequence_Contains(self->listed, future);
    if (listed < 0 || (!listed && PyList_Append(self->listed, future) < 0)) {
        return NULL;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef BatchWait_methods[] = {
    {"outcome", (PyCFunction)BatchWait_outcome, METH_O,
     "outcome(offset_delta): (Completion, error) of the record, or None."},
    {"listen", (PyCFunction)BatchWait_listen, METH_O,
     "listen(future): list it for its completion; False if done already."},
    {NULL, NULL, 0, NULL}
};

static PyMemberDef BatchWait_members[] = {
    {"cond", T_OBJECT, offsetof(BatchWait, cond), READONLY, NULL},
    {"completions", T_OBJECT, offsetof(BatchWait, completions), READONLY,
     NULL},
    {"listed", T_OBJECT, offsetof(BatchWait, listed), READONLY, NULL},
    {"pending", T_PYSSIZET, offsetof(BatchWait, pending), READONLY, NULL},
    {"retire_at", T_DOUBLE, offsetof(BatchWait, retire_at), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}
};

PyTypeObject BatchWaitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmkafka.producer._tracker.BatchWait",
    .tp_basicsize = sizeof(BatchWait),
    .tp_dealloc = (destructor)BatchWait_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "This process's records in one generation of one batch.",
    .tp_traverse = (traverseproc)BatchWait_traverse,
    .tp_clear = (inquiry)BatchWait_clear,
    .tp_methods = BatchWait_methods,
    .tp_members = BatchWait_members,
};

/* ------------------------------------------------------------------------
 * Future: a record's facts and its batch's wait, with futures.py's methods
 * installed (adopt_methods). Not tracked by the garbage collector (a
 * Python subclass would be, as every heap type, and a million futures kept
 * in a list cost collections): nothing it refers to refers back to it once
 * its wait stops listing it and its callbacks ran.
 */

Py_ssize_t live_futures;

static PyObject *
FutureBase_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *future = PyType_GenericNew(type, args, kwargs);

    if (future != NULL) {
        live_futures++;
    }
    return future;
}

static void
FutureBase_dealloc(FutureBase *self)
{
    live_futures--;
    Py_CLEAR(self->wait);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->report);
    Py_CLEAR(self->callbacks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
FutureBase_outcome(FutureBase *self, PyObject *Py_UNUSED(ignored))
{
    if (self->wait == NULL) {
        Py_RETURN_NONE;
    }
    if (Py_IS_TYPE(self->wait, &BatchWaitType)) {
        return outcome_of((BatchWait *)self->wait, self->offset_delta);
    }
    return PyObject_CallMethod(self->wait, "outcome", "I", self->offset_delta);
}

static PyMethodDef FutureBase_methods[] = {
    {"_outcome", (PyCFunction)FutureBase_outcome, METH_NOARGS,
     "(Completion, error) of the record, or None while it is pending."},
    {NULL, NULL, 0, NULL}
};

#define FB(name) offsetof(FutureBase, name)

static PyMemberDef FutureBase_members[] = {
    {"_wait", T_OBJECT, FB(wait), 0, NULL},
    {"topic", T_OBJECT, FB(topic), 0, NULL},
    {"report", T_OBJECT, FB(report), 0, NULL},
    {"_callbacks", T_OBJECT, FB(callbacks), 0, NULL},
    {"registration", T_ULONGLONG, FB(registration), 0, NULL},
    {"timestamp", T_LONGLONG, FB(timestamp), 0, NULL},
    {"partition", T_PYSSIZET, FB(partition), 0, NULL},
    {"key_size", T_PYSSIZET, FB(key_size), 0, NULL},
    {"value_size", T_PYSSIZET, FB(value_size), 0, NULL},
    {"header_size", T_PYSSIZET, FB(header_size), 0, NULL},
    {"offset_delta", T_UINT, FB(offset_delta), 0, NULL},
    {"flags", T_INT, FB(flags), 0, NULL},
    {NULL, 0, 0, 0, NULL}
};

PyTypeObject FutureBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmkafka.producer._tracker.Future",
    .tp_basicsize = sizeof(FutureBase),
    .tp_dealloc = (destructor)FutureBase_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A record's facts and its batch's wait; futures.py installs the "
              "methods of its Future.",
    .tp_methods = FutureBase_methods,
    .tp_members = FutureBase_members,
    .tp_new = FutureBase_new,
};

PyDoc_STRVAR(adopt_methods__doc__,
"adopt_methods($module, type, namespace, /)\n"
"--\n"
"\n"
"Install the namespace's methods and properties in this module's Future\n"
"type (futures.py's Future, written in Python).");

static PyObject *
adopt_methods(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *name, *value;
    Py_ssize_t pos = 0;

    if (nargs != 2 || args[0] != (PyObject *)&FutureBaseType
        || !PyDict_Check(args[1]))
    {
        PyErr_SetString(PyExc_TypeError,
                        "adopt_methods(Future, namespace dict)");
        return NULL;
    }
    PyObject *dict = FutureBaseType.tp_dict;
    while (PyDict_Next(args[1], &pos, &name, &value)) {
        if (PyDict_SetItem(dict, name, value) < 0) {
            return NULL;
        }
    }
    PyType_Modified(&FutureBaseType);
    Py_RETURN_NONE;
}

static PyObject *
count_live_futures(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(live_futures);
}

PyMethodDef futures_functions[] = {
    {"live_futures", (PyCFunction)count_live_futures, METH_NOARGS,
     "How many Future objects exist (made and not yet freed)."},
    {"adopt_methods", (PyCFunction)(void (*)(void))adopt_methods,
     METH_FASTCALL, adopt_methods__doc__},
    {NULL, NULL, 0, NULL}
};
