/*
 * The futures of a send in C, the twin of futures.py: its PyTracker,
 * BatchWait and FutureBase stay the reference (and the path when this is not
 * built); the tests run both.
 *
 * Rules (as in futures.py):
 * - Every function here runs with the GIL held and never releases it, so
 *   each is atomic for the threads of this process. The producer's lock
 *   (cond) is still held around complete() by its caller, so that a future's
 *   callbacks and its listing change together (Future.add_done_callback).
 * - Tracker.send appends and registers in one step: no completion of the
 *   record can be handled in between. Tracker.track registers a record the
 *   Python path appended: its completion may have come first, so a
 *   completed wait stays until retire() forgets it, and a registration
 *   looks for its outcome first.
 * - A future is listed in its wait only when a report or a callback listens
 *   to it; the others are counted (pending, deltas) and live only as long as
 *   their caller keeps them (a discarded future is freed at once).
 *
 * The style is CPython's (PEP 7).
 */
#include "_tracker_internal.h"

const AppendAPI *append_api;

/* ------------------------------------------------------------------------
 * Tracker: the futures of one client (client.py).
 */


static int
Tracker_traverse(Tracker *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cond);
    Py_VISIT(self->future_type);
    Py_VISIT(self->on_batch);
    Py_VISIT(self->on_came_first);
    Py_VISIT(self->waits);
    for (int i = 0; i < CACHE_SIZE; i++) {
        Py_VISIT(self->cache[i].wait);
    }
    return 0;
}

void
clear_cache(Tracker *self)
{
    for (int i = 0; i < CACHE_SIZE; i++) {
        Py_CLEAR(self->cache[i].wait);
    }
}

static int
Tracker_clear_refs(Tracker *self)
{
    Py_CLEAR(self->cond);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->on_batch);
    Py_CLEAR(self->on_came_first);
    Py_CLEAR(self->waits);
    clear_cache(self);
    return 0;
}

static void
Tracker_dealloc(Tracker *self)
{
    PyObject_GC_UnTrack(self);
    Tracker_clear_refs(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Tracker_init(Tracker *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"cond", "future_type", "on_batch", NULL};
    PyObject *cond, *future_type, *on_batch;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:Tracker", names, &cond,
                                     &future_type, &on_batch))
    {
        return -1;
    }
    if (!PyType_Check(future_type)
        || !PyType_IsSubtype((PyTypeObject *)future_type, &FutureBaseType))
    {
        PyErr_SetString(PyExc_TypeError,
                        "Tracker() argument 'future_type' must be a subclass "
                        "of FutureBase");
        return -1;
    }
    PyObject *waits = PyDict_New();
    if (waits == NULL) {
        return -1;
    }
    Tracker_clear_refs(self);
    self->cond = Py_NewRef(cond);
    self->future_type = Py_NewRef(future_type);
    self->on_batch = Py_NewRef(on_batch);
    self->on_came_first = Py_NewRef(Py_None);
    self->waits = waits;
    self->outstanding = 0;
    return 0;
}

/* The wait of ``registration`` (borrowed: the dict holds it), made when there
 * is none. Making one allocates, and an allocation may run the garbage
 * collector, whose callbacks and finalizers are Python code: another thread
 * (the completion thread, or a send) can run there and make the same wait.
 * So the new wait goes in with PyDict_SetDefault, which runs no Python code
 * between its lookup and its insert: whoever is second takes the first one's
 * wait (a replaced wait would hold a record nobody completes). */
BatchWait *
wait_for(Tracker *self, uint64_t registration)
{
    CacheEntry *entry = &self->cache[(registration >> 32) % CACHE_SIZE];

    if (entry->wait != NULL && entry->registration == registration) {
        return entry->wait;
    }
    if (self->waits == NULL) {
        PyErr_SetString(PyExc_ValueError, "an uninitialized Tracker");
        return NULL;
    }
    PyObject *key = PyLong_FromUnsignedLongLong(registration);
    if (key == NULL) {
        return NULL;
    }
    BatchWait *wait = (BatchWait *)PyDict_GetItemWithError(self->waits, key);
    if (wait == NULL) {
        BatchWait *made = PyErr_Occurred() ? NULL : batchwait_new(self->cond);
        if (made == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        wait = (BatchWait *)PyDict_SetDefault(self->waits, key,
                                              (PyObject *)made);
        Py_DECREF(made);  /* the dict holds the one it kept */
        if (wait == NULL) {
            Py_DECREF(key);
            return NULL;
        }
    }
    Py_DECREF(key);
    /* (the old entry's wait may be freed here, running Python code: the
     * entry is rewritten first, and ``wait`` is the dict's) */
    BatchWait *old = entry->wait;
    entry->wait = (BatchWait *)Py_NewRef(wait);
    entry->registration = registration;
    Py_XDECREF(old);
    return wait;
}

static int
count_pending(Tracker *self, BatchWait *wait, uint32_t delta)
{
    if (grow(&wait->deltas, &wait->cap_deltas, wait->n_deltas + 1) < 0) {
        return -1;
    }
    wait->deltas[wait->n_deltas++] = delta;
    wait->pending++;
    self->outstanding++;
    return 0;
}

typedef struct {
    uint64_t registration;
    int flags;
    Py_ssize_t partition;
    uint32_t offset_delta;
    int64_t timestamp;
    Py_ssize_t key_size, value_size, header_size;
} Facts;

static PyObject *
new_future(Tracker *self, BatchWait *wait, PyObject *topic, const Facts *facts,
           PyObject *report)
{
    PyTypeObject *type = (PyTypeObject *)self->future_type;
    FutureBase *future = (FutureBase *)type->tp_alloc(type, 0);

    if (future == NULL) {
        return NULL;
    }
    live_futures++;
    future->wait = Py_NewRef(wait);
    future->topic = Py_NewRef(topic);
    future->report = Py_NewRef(report);
    future->callbacks = Py_NewRef(Py_None);
    future->registration = facts->registration;
    future->flags = facts->flags;
    future->partition = facts->partition;
    future->offset_delta = facts->offset_delta;
    future->timestamp = facts->timestamp;
    future->key_size = facts->key_size;
    future->value_size = facts->value_size;
    future->header_size = facts->header_size;
    return (PyObject *)future;
}

/* Register a record: counted, and a future when one is wanted (listed when a
 * report awaits it). Returns the future, None, or NULL on error. The wait is
 * held for the call: making the future may run Python code (see wait_for). */
static PyObject *
register_record(Tracker *self, PyObject *topic, const Facts *facts,
                PyObject *report, int want_future)
{
    BatchWait *wait = wait_for(self, facts->registration);
    PyObject *future = NULL, *result = NULL;

    if (wait == NULL) {
        return NULL;
    }
    Py_INCREF(wait);
    if (want_future || report != Py_None) {
        future = new_future(self, wait, topic, facts, report);
        if (future == NULL) {
            goto done;
        }
    }
    if (outcome_index(wait, facts->offset_delta) < 0) {  /* not done already */
        if (count_pending(self, wait, facts->offset_delta) < 0
            || (report != Py_None && PyList_Append(wait->listed, future) < 0))
        {
            goto done;
        }
    }
    else if (report != Py_None && self->on_came_first != NULL
             && self->on_came_first != Py_None)
    {
        /* Its completion came first (handled while the future was being made:
         * the allocation may run Python code), so none will report it. */
        PyObject *called = PyObject_CallOneArg(self->on_came_first, future);
        if (called == NULL) {
            PyErr_WriteUnraisable(self->on_came_first);
        }
        Py_XDECREF(called);
    }
    result = want_future && future != NULL ? Py_NewRef(future)
                                           : Py_NewRef(Py_None);
done:
    Py_XDECREF(future);
    Py_DECREF(wait);
    return result;
}

PyDoc_STRVAR(Tracker_send__doc__,
"send($self, fast, route, topic, partition, key, value, report,\n"
"     want_future, /)\n"
"--\n"
"\n"
"FastAppend.send_kv and the record's registration in one step. Returns its\n"
"future (None when not wanted); an int when Python must take over, nothing\n"
"written (the verdict, futures.py's Verdict): p >= 0 partition p needs a new\n"
"batch; -2 - p partition p's stripe was busy; -1 resolve the record anew.\n"
"A full batch or one the Sender must hear of calls\n"
"on_batch(topic, flags, partition).");

static PyObject *
Tracker_send(Tracker *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError,
                     "send() takes exactly 8 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], append_api->fast_append_type)) {
        PyErr_SetString(PyExc_TypeError,
                        "send() argument 'fast' must be a FastAppend");
        return NULL;
    }
    Py_ssize_t partition = PyLong_AsSsize_t(args[3]);
    if (partition == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int want_future = PyObject_IsTrue(args[7]);
    if (want_future < 0) {
        return NULL;
    }
    return tracker_send((PyObject *)self, args[0], args[1], args[2],
                        partition, args[4], args[5], args[6], want_future);
}

PyObject *
tracker_send(PyObject *tracker, PyObject *fast, PyObject *route,
             PyObject *topic, Py_ssize_t partition, PyObject *key,
             PyObject *value, PyObject *report, int want_future)
{
    return tracker_send_headers(tracker, fast, route, topic, partition, key,
                                value, NULL, 0, report, want_future);
}

/* tracker_send for a record with headers (NULL or None: none), whose size
 * bound must stay under header_budget (the append's send_kv: what it does
 * not take goes to the Python path, -1). */
PyObject *
tracker_send_headers(PyObject *tracker, PyObject *fast, PyObject *route,
                     PyObject *topic, Py_ssize_t partition, PyObject *key,
                     PyObject *value, PyObject *headers,
                     Py_ssize_t header_budget, PyObject *report,
                     int want_future)
{
    Tracker *self = (Tracker *)tracker;
    SendResult sent;
    int status = append_api->send_kv(fast, route, partition, key, value,
                                     headers, header_budget, &sent);

    if (status < 0) {
        return NULL;
    }
    if (status == NEEDS_NEW_BATCH) {
        return PyLong_FromSsize_t(sent.partition);  /* the verdict: see _tracker.h */
    }
    if (status == BUSY) {
        return PyLong_FromSsize_t(VERDICT_BUSY - sent.partition);
    }
    if (status != APPENDED) {
        return PyLong_FromLong(VERDICT_RESOLVE);
    }
    Facts facts = {
        .registration = ((uint64_t)sent.hit.batch_id << 32)
                        | sent.hit.generation,
        .flags = sent.hit.full | (sent.hit.new_batch << 1)
                 | (sent.hit.wake << 2),
        .partition = sent.partition,
        .offset_delta = sent.hit.offset_delta,
        .timestamp = sent.timestamp,
        .key_size = key == Py_None ? -1 : PyBytes_GET_SIZE(key),
        .value_size = value == Py_None ? -1 : PyBytes_GET_SIZE(value),
        .header_size = sent.header_size,
    };
    PyObject *future = register_record(self, topic, &facts, report,
                                       want_future);
    if (future != NULL && (facts.flags & (FLAG_FULL | FLAG_WAKE))
        && self->on_batch != Py_None)
    {
        /* The record is in the pool and registered: a failing hook must not
         * make its caller think otherwise. */
        PyObject *done = PyObject_CallFunction(self->on_batch, "Oin", topic,
                                               facts.flags, facts.partition);
        if (done == NULL) {
            PyErr_WriteUnraisable(self->on_batch);
        }
        Py_XDECREF(done);
    }
    return future;
}

Py_ssize_t
tracker_outstanding(PyObject *tracker)
{
    return ((Tracker *)tracker)->outstanding;
}

static int
facts_arg(PyObject *tuple, Facts *facts)
{
    long long values[8];

    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "track() argument 'facts' must be a tuple of 8 ints");
        return -1;
    }
    for (int i = 0; i < 8; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (i == 0) {
            facts->registration = PyLong_AsUnsignedLongLong(item);
            if (facts->registration == (uint64_t)-1 && PyErr_Occurred()) {
                return -1;
            }
            continue;
        }
        values[i] = PyLong_AsLongLong(item);
        if (values[i] == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    if (values[3] < 0 || values[3] > (long long)ALL_DELTAS) {
        PyErr_SetString(PyExc_OverflowError, "an offset delta is 32 bits");
        return -1;
    }
    facts->flags = (int)values[1];
    facts->partition = (Py_ssize_t)values[2];
    facts->offset_delta = (uint32_t)values[3];
    facts->timestamp = values[4];
    facts->key_size = (Py_ssize_t)values[5];
    facts->value_size = (Py_ssize_t)values[6];
    facts->header_size = (Py_ssize_t)values[7];
    return 0;
}

PyDoc_STRVAR(Tracker_track__doc__,
"track($self, topic, facts, report, want_future, /)\n"
"--\n"
"\n"
"Register a record the Python path appended (facts: futures.RecordFacts);\n"
"its future, or None when not wanted and no report awaits it.");

static PyObject *
Tracker_track(Tracker *self, PyObject *const *args, Py_ssize_t nargs)
{
    Facts facts;

    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError,
                     "track() takes exactly 4 arguments (%zd given)", nargs);
        return NULL;
    }
    int want_future = PyObject_IsTrue(args[3]);
    if (want_future < 0 || facts_arg(args[1], &facts) < 0) {
        return NULL;
    }
    return register_record(self, args[0], &facts, args[2],
                           want_future || args[2] != Py_None);
}

static PyMethodDef Tracker_methods[] = {
    {"send", (PyCFunction)(void (*)(void))Tracker_send, METH_FASTCALL,
     Tracker_send__doc__},
    {"track", (PyCFunction)(void (*)(void))Tracker_track, METH_FASTCALL,
     Tracker_track__doc__},
    {"complete", (PyCFunction)(void (*)(void))Tracker_complete, METH_FASTCALL,
     Tracker_complete__doc__},
    {"pending", (PyCFunction)Tracker_pending, METH_NOARGS,
     "(registration, records pending) of every wait with records pending."},
    {"retire", (PyCFunction)Tracker_retire, METH_O,
     "retire(now): forget completed waits with nothing pending whose time "
     "is up."},
    {"clear", (PyCFunction)Tracker_clear, METH_NOARGS,
     "Forget every wait (the producer is closed)."},
    {NULL, NULL, 0, NULL}
};

static PyMemberDef Tracker_members[] = {
    {"outstanding", T_PYSSIZET, offsetof(Tracker, outstanding), READONLY,
     "Records registered and not yet completed."},
    {"waits", T_OBJECT, offsetof(Tracker, waits), READONLY, NULL},
    {"cond", T_OBJECT, offsetof(Tracker, cond), READONLY, NULL},
    {"on_came_first", T_OBJECT_EX, offsetof(Tracker, on_came_first), 0,
     "Called with the future of a record with a report whose completion came before "
     "its registration: no completion will report it."},
    {NULL, 0, 0, 0, NULL}
};

PyTypeObject TrackerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmkafka.producer._tracker.Tracker",
    .tp_basicsize = sizeof(Tracker),
    .tp_dealloc = (destructor)Tracker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Tracker(cond, future_type, on_batch): the futures of one "
              "client (futures.py's PyTracker in C).",
    .tp_traverse = (traverseproc)Tracker_traverse,
    .tp_clear = (inquiry)Tracker_clear_refs,
    .tp_methods = Tracker_methods,
    .tp_members = Tracker_members,
    .tp_init = (initproc)Tracker_init,
    .tp_new = PyType_GenericNew,
};

static const TrackerAPI tracker_api = {
    .tracker_type = &TrackerType,
    .batch_wait_type = &BatchWaitType,
    .future_base_type = &FutureBaseType,
    .send = tracker_send,
    .outstanding = tracker_outstanding,
    .outcome_index = outcome_index,
};

static int
tracker_exec(PyObject *module)
{
    if ((append_api = import_append_api()) == NULL) {
        return -1;
    }
    if (PyModule_AddType(module, &BatchWaitType) < 0
        || PyModule_AddType(module, &FutureBaseType) < 0
        || PyModule_AddType(module, &TrackerType) < 0
        || PyModule_AddFunctions(module, futures_functions) < 0
        || entry_exec(module) < 0)
    {
        return -1;
    }
    return add_api_capsule(module, &tracker_api, TRACKER_API_CAPSULE);
}

static PyModuleDef_Slot tracker_slots[] = {
    {Py_mod_exec, tracker_exec},
#ifdef Py_mod_multiple_interpreters
    /* the types are static, shared by every interpreter */
    {Py_mod_multiple_interpreters,
     Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL}
};

static struct PyModuleDef tracker_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shmkafka.producer._tracker",
    .m_doc = "The futures of a send and the facades' C entries (futures.py and "
             "entry.py are the reference).",
    .m_size = 0,
    .m_slots = tracker_slots,
};

PyMODINIT_FUNC
PyInit__tracker(void)
{
    return PyModuleDef_Init(&tracker_module);
}
