/*
 * The public calls' common case in C: KafkaProducer.send and
 * Producer.produce are methods of the C bases here (SendEntry,
 * ProduceEntry), and AIOKafkaProducer's async send calls AppendEntry's
 * _fast_append, so the common record costs one C call: argument checks,
 * the partitioner, the append and the future or report, without a Python
 * frame. Anything else calls the facade's Python method (_send, _produce)
 * with the same arguments: that method is the reference, and the fallback
 * for every case not handled here.
 *
 * Rules:
 * - The facade turns the fast path on (_fast_enable) once its client is up
 *   and off (_fast_disable) when it closes; a fork (any fork: uWSGI's does
 *   not run Python's at-fork hooks) turns it off in the child until the
 *   facade enables it again with the child's own client.
 * - Nothing is written when a check fails: the Python path then starts the
 *   record from the beginning. When the append cannot be done here (a new
 *   batch, a moved directory) nothing was written either.
 * - Only records the Python path would send unchanged are taken here: bytes
 *   key (or None) and value, no headers or a list of at most MAX_C_HEADERS
 *   (str, bytes or None) pairs (the append checks them), no partition, no
 *   timestamp, a topic whose route the client already cached (so its name was
 *   checked), a partitioner this file knows.
 * - A guard (_fast_guard: a u32 of shared memory and the value it must hold)
 *   sends every record to the Python path once the word changed: a
 *   transactional producer's, fenced by a newer owner of its transactional
 *   id, raises there before anything is written.
 *
 * The style is CPython's (PEP 7).
 */
#include "_tracker_internal.h"

unsigned long fork_generation;
static uint32_t crc32_table[256];

static PyObject *str_value, *str_key, *str_topic, *str_headers;
static PyObject *str_partition, *str_timestamp_ms;
static PyObject *str_on_delivery, *str_callback, *str_send, *str_produce;
static PyObject *str_send_verdict, *str_produce_verdict;

static void
child_after_fork(void)
{
    fork_generation++;
}

static uint32_t
crc32_of(PyObject *key)
{
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(key);
    Py_ssize_t n = PyBytes_GET_SIZE(key);
    uint32_t crc = 0xFFFFFFFFu;

    for (Py_ssize_t i = 0; i < n; i++) {
        crc = crc32_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    }
    return crc ^ 0xFFFFFFFFu;
}


static inline int
name_is(PyObject *name, PyObject *interned)
{
    return name == interned
           || (PyUnicode_Check(name) && PyUnicode_Compare(name, interned) == 0);
}

/* The call's keywords: each of ``taken`` is stored in its place, each of
 * ``if_none`` may only be None; 0 when anything else is there (more than 3
 * positional arguments, another keyword): the Python path's call. */
typedef struct {
    PyObject *name;
    PyObject **out;
} Keyword;

static int
take_keywords(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              const Keyword *taken, size_t n_taken, PyObject *const *if_none,
              size_t n_if_none)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);

    if (nargs > 3) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        PyObject *arg = args[nargs + i];
        size_t k = 0;
        /* a caller's keyword is interned, as ours: one pass by identity first
         * (comparing by value cost produce() a tenth of its instructions) */
        while (k < n_taken && name != taken[k].name) {
            k++;
        }
        if (k == n_taken) {
            k = 0;
            while (k < n_taken && !name_is(name, taken[k].name)) {
                k++;
            }
        }
        if (k < n_taken) {
            *taken[k].out = arg;
            continue;
        }
        size_t n = 0;
        while (n < n_if_none && !name_is(name, if_none[n])) {
            n++;
        }
        if (n == n_if_none || arg != Py_None) {
            return 0;
        }
    }
    return 1;
}

/* The Python path, with the call's own arguments. */
static PyObject *
python_path(Entry *self, PyObject *method, PyObject *const *args,
            Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *bound = PyObject_GetAttr((PyObject *)self, method);

    if (bound == NULL) {
        return NULL;
    }
    PyObject *result = PyObject_Vectorcall(bound, args, nargs, kwnames);
    Py_DECREF(bound);
    return result;
}

/* The facade's one Python path for a record the C append left, nothing
 * written: method(verdict, *args, **kwargs), ``verdict`` being what
 * tracker_send said (_tracker_internal.h: the partition that needs a new
 * batch, a busy stripe's, or resolve anew). That path never tries C again. */
static PyObject *
python_verdict_path(Entry *self, PyObject *method, PyObject *verdict,
                    PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames)
{
    Py_ssize_t given = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    PyObject *small[12];
    PyObject **all = small;

    if (given + 1 > (Py_ssize_t)Py_ARRAY_LENGTH(small)) {
        all = PyMem_New(PyObject *, given + 1);
        if (all == NULL) {
            return PyErr_NoMemory();
        }
    }
    all[0] = verdict;
    memcpy(all + 1, args, (size_t)given * sizeof(PyObject *));
    PyObject *result = python_path(self, method, all, nargs + 1, kwnames);
    if (all != small) {
        PyMem_Free(all);
    }
    return result;
}

/* The checks both calls share; the record's route (borrowed), or NULL (the
 * Python path; no exception set). *budget: what the record's headers may add
 * to its size before the Python path must check it (the append checks
 * them). */
static PyObject *
common_route(Entry *self, PyObject *topic, PyObject *value, PyObject *key,
             Py_ssize_t *budget)
{
    if (self->tracker == NULL || self->generation != fork_generation
        || (self->guard != NULL && *self->guard != self->guard_value)
        || topic == NULL || !PyUnicode_CheckExact(topic)
        || !PyBytes_CheckExact(value)
        || (key != Py_None && !PyBytes_CheckExact(key)))
    {
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(value)
                      + (key == Py_None ? 0 : PyBytes_GET_SIZE(key));
    if (size >= self->size_precheck) {
        return NULL;
    }
    *budget = self->size_precheck - size;
    PyObject *route = PyDict_GetItemWithError(self->routes, topic);
    if (route == NULL) {
        PyErr_Clear();
    }
    return route;
}

/* The keyed record's partition by the configured partitioner; -1: let the
 * append compute murmur2; -2: the Python path. */
static Py_ssize_t
keyed_partition(Entry *self, PyObject *route, PyObject *key)
{
    if (PyBytes_GET_SIZE(key) == 0) {
        return -2;  /* (librdkafka partitions empty keys its own way) */
    }
    if (self->partitioner == PARTITION_MURMUR2) {
        return -1;
    }
    if (self->partitioner == PARTITION_CRC32) {
        Py_ssize_t count = PyTuple_GET_SIZE(PyTuple_GET_ITEM(route, 1));
        return (Py_ssize_t)(crc32_of(key) % (uint32_t)count);
    }
    return -2;
}

PyDoc_STRVAR(SendEntry_send__doc__,
"send($self, /, topic, value=None, key=None, headers=None, partition=None,\n"
"     timestamp_ms=None)\n"
"--\n"
"\n"
"Append one record; returns a future of RecordMetadata (kafka-python's).");

static PyObject *
SendEntry_send(Entry *self, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    PyObject *topic = nargs > 0 ? args[0] : NULL;
    PyObject *value = nargs > 1 ? args[1] : Py_None;
    PyObject *key = nargs > 2 ? args[2] : Py_None;
    PyObject *headers = Py_None;
    Keyword taken[] = {{str_value, &value}, {str_key, &key}, {str_topic, &topic},
                       {str_headers, &headers}};
    PyObject *if_none[] = {str_partition, str_timestamp_ms};

    if (!take_keywords(args, nargs, kwnames, taken, Py_ARRAY_LENGTH(taken),
                       if_none, Py_ARRAY_LENGTH(if_none)))
    {
        goto python;
    }
    Py_ssize_t budget;
    PyObject *route = common_route(self, topic, value, key, &budget);
    if (route == NULL) {
        goto python;
    }
    Py_ssize_t partition = key == Py_None
                           ? append_api->sticky(self->fast, route) : -1;
    if (partition == -1 && key == Py_None) {
        goto python;  /* no sticky partition yet: Python picks one */
    }
    PyObject *future = tracker_send_headers(self->tracker, self->fast, route,
                                            topic, partition, key, value,
                                            headers, budget, Py_None, 1);
    if (future == NULL || !PyLong_CheckExact(future)) {
        return future;
    }
    /* not written here: Python's one path does it all, with the verdict */
    PyObject *sent = python_verdict_path(self, str_send_verdict, future, args,
                                         nargs, kwnames);
    Py_DECREF(future);
    return sent;
python:
    return python_path(self, str_send, args, nargs, kwnames);
}

/* A report's (callback, key, value, monotonic start): a tuple filled here,
 * where Py_BuildValue parsed its format string for every record. */
static PyObject *
new_report(PyObject *callback, PyObject *key, PyObject *value)
{
    PyObject *started = PyFloat_FromDouble(monotonic_s());
    PyObject *report = started == NULL ? NULL : PyTuple_New(4);

    if (report == NULL) {
        Py_XDECREF(started);
        return NULL;
    }
    PyTuple_SET_ITEM(report, 0, Py_NewRef(callback));
    PyTuple_SET_ITEM(report, 1, Py_NewRef(key));
    PyTuple_SET_ITEM(report, 2, Py_NewRef(value));
    PyTuple_SET_ITEM(report, 3, started);
    return report;
}

PyDoc_STRVAR(ProduceEntry_produce__doc__,
"produce($self, /, topic, value=None, key=None, partition=-1,\n"
"        on_delivery=None, callback=None, timestamp=0, headers=None)\n"
"--\n"
"\n"
"Queue one record for sending; its delivery report is served by poll()\n"
"or flush() (confluent-kafka's).");

static PyObject *
ProduceEntry_produce(Entry *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames)
{
    PyObject *topic = nargs > 0 ? args[0] : NULL;
    PyObject *value = nargs > 1 ? args[1] : Py_None;
    PyObject *key = nargs > 2 ? args[2] : Py_None;
    PyObject *callback = Py_None, *on_delivery = Py_None;
    PyObject *headers = Py_None;
    Keyword taken[] = {{str_value, &value}, {str_key, &key}, {str_topic, &topic},
                       {str_callback, &callback}, {str_on_delivery, &on_delivery},
                       {str_headers, &headers}};

    if (!take_keywords(args, nargs, kwnames, taken, Py_ARRAY_LENGTH(taken),
                       NULL, 0))
    {
        goto python;  /* a partition, a timestamp, a typo */
    }
    Py_ssize_t budget;
    PyObject *route = common_route(self, topic, value, key, &budget);
    if (route == NULL || self->reports == NULL || self->unassigned == NULL) {
        goto python;
    }
    Py_ssize_t waiting = PyObject_Length(self->unassigned);
    Py_ssize_t queued = PyObject_Length(self->reports);
    if (waiting != 0 || queued < 0
        || tracker_outstanding(self->tracker) + queued >= self->max_messages)
    {
        PyErr_Clear();
        goto python;  /* (Python raises the full queue's BufferError) */
    }
    Py_ssize_t partition = key == Py_None
                           ? append_api->sticky(self->fast, route)
                           : keyed_partition(self, route, key);
    if (partition < -1 || (partition == -1 && key == Py_None)) {
        goto python;
    }
    if (callback == Py_None) {  /* callback or on_delivery or the configured */
        callback = on_delivery != Py_None ? on_delivery : self->on_delivery;
    }
    PyObject *report = Py_None;
    if (callback != Py_None) {
        report = new_report(callback, key, value);
        if (report == NULL) {
            return NULL;
        }
        /* Out of the garbage collector, as the Future that holds it: a million
         * pending reports otherwise make every collection walk them (a fifth
         * of a produce() loop's time). Nothing in it can refer back to it. */
        PyObject_GC_UnTrack(report);
    }
    else {
        Py_INCREF(report);
    }
    PyObject *done = tracker_send_headers(self->tracker, self->fast, route,
                                          topic, partition, key, value,
                                          headers, budget, report, 0);
    Py_DECREF(report);
    if (done == NULL) {
        return NULL;
    }
    if (!PyLong_CheckExact(done)) {
        return done;  /* None */
    }
    /* not written here: Python's one path does it all, with the verdict */
    PyObject *left = python_verdict_path(self, str_produce_verdict, done,
                                         args, nargs, kwnames);
    Py_DECREF(done);
    return left;
python:
    return python_path(self, str_produce, args, nargs, kwnames);
}

PyDoc_STRVAR(AppendEntry_fast_append__doc__,
"_fast_append($self, topic, value, key, report, /)\n"
"--\n"
"\n"
"Append one keyless or keyed record to the pool's sticky or key's\n"
"partition and register ``report`` for its outcome (handed to the\n"
"client's on_done): True. Nothing written, the facade's Python path\n"
"takes the record: False when C did not try it, else the verdict (an int:\n"
"Tracker.send's) for its one path (AIOKafkaProducer's common send).");

static PyObject *
AppendEntry_fast_append(Entry *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError,
                     "_fast_append() takes exactly 4 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    PyObject *topic = args[0], *value = args[1], *key = args[2];
    Py_ssize_t budget;
    PyObject *route = common_route(self, topic, value, key, &budget);
    if (route == NULL) {
        Py_RETURN_FALSE;
    }
    Py_ssize_t partition = key == Py_None
                           ? append_api->sticky(self->fast, route)
                           : keyed_partition(self, route, key);
    if (partition < -1 || (partition == -1 && key == Py_None)) {
        Py_RETURN_FALSE;
    }
    PyObject *done = tracker_send(self->tracker, self->fast, route, topic,
                                  partition, key, value, args[3], 0);
    if (done == NULL) {
        return NULL;
    }
    if (PyLong_CheckExact(done)) {
        return done;  /* the verdict */
    }
    Py_DECREF(done);
    Py_RETURN_TRUE;
}

#define ENTRY_COMMON_METHODS \
    {"_fast_enable", (PyCFunction)(void (*)(void))Entry_fast_enable, \
     METH_FASTCALL, Entry_fast_enable__doc__}, \
    {"_fast_guard", (PyCFunction)(void (*)(void))Entry_fast_guard, \
     METH_FASTCALL, Entry_fast_guard__doc__}, \
    {"_fast_disable", (PyCFunction)Entry_fast_disable, METH_NOARGS, \
     "Send every record through the Python path."}, \
    {"_fast_enabled", (PyCFunction)Entry_fast_enabled, METH_NOARGS, \
     "The common record takes the C path (in this process)."}

static PyMethodDef SendEntry_methods[] = {
    {"send", (PyCFunction)(void (*)(void))SendEntry_send,
     METH_FASTCALL | METH_KEYWORDS, SendEntry_send__doc__},
    ENTRY_COMMON_METHODS,
    {NULL, NULL, 0, NULL}
};

static PyMethodDef ProduceEntry_methods[] = {
    {"produce", (PyCFunction)(void (*)(void))ProduceEntry_produce,
     METH_FASTCALL | METH_KEYWORDS, ProduceEntry_produce__doc__},
    ENTRY_COMMON_METHODS,
    {NULL, NULL, 0, NULL}
};

static PyMethodDef AppendEntry_methods[] = {
    {"_fast_append", (PyCFunction)(void (*)(void))AppendEntry_fast_append,
     METH_FASTCALL, AppendEntry_fast_append__doc__},
    ENTRY_COMMON_METHODS,
    {NULL, NULL, 0, NULL}
};

/* The three entries differ in their name, doc and methods only. */
#define ENTRY_TYPE(type_name, name, doc, methods)                           \
    static PyTypeObject type_name = {                                       \
        PyVarObject_HEAD_INIT(NULL, 0)                                      \
        .tp_name = "shmkafka.producer._tracker." name,                      \
        .tp_basicsize = sizeof(Entry),                                      \
        .tp_dealloc = (destructor)Entry_dealloc,                            \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE                \
                    | Py_TPFLAGS_HAVE_GC,                                   \
        .tp_doc = doc,                                                      \
        .tp_traverse = (traverseproc)Entry_traverse,                        \
        .tp_clear = (inquiry)Entry_clear,                                   \
        .tp_methods = methods,                                              \
        .tp_new = PyType_GenericNew,                                        \
    }

ENTRY_TYPE(SendEntryType, "SendEntry",
           "KafkaProducer's base: send() in C for the common record.",
           SendEntry_methods);
ENTRY_TYPE(ProduceEntryType, "ProduceEntry",
           "Producer's base: produce() in C for the common record.",
           ProduceEntry_methods);
ENTRY_TYPE(AppendEntryType, "AppendEntry",
           "AIOKafkaProducer's base: the common record's append in C.",
           AppendEntry_methods);

static int
intern_names(void)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&str_value, "value"}, {&str_key, "key"}, {&str_topic, "topic"},
        {&str_headers, "headers"}, {&str_partition, "partition"},
        {&str_timestamp_ms, "timestamp_ms"},
        {&str_on_delivery, "on_delivery"}, {&str_callback, "callback"},
        {&str_send, "_send"}, {&str_produce, "_produce"},
        {&str_send_verdict, "_send_verdict"},
        {&str_produce_verdict, "_produce_verdict"},
    };
    for (size_t i = 0; i < Py_ARRAY_LENGTH(names); i++) {
        if (*names[i].slot == NULL
            && (*names[i].slot = PyUnicode_InternFromString(names[i].text))
               == NULL)
        {
            return -1;
        }
    }
    return 0;
}

int
entry_exec(PyObject *module)
{
    static int once;


    if (!once) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) {
                c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            }
            crc32_table[n] = c;
        }
        if (pthread_atfork(NULL, NULL, child_after_fork) != 0) {
            PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
            return -1;
        }
        once = 1;
    }
    if (intern_names() < 0
        || PyModule_AddType(module, &SendEntryType) < 0
        || PyModule_AddType(module, &ProduceEntryType) < 0
        || PyModule_AddType(module, &AppendEntryType) < 0
        || PyModule_AddIntConstant(module, "PARTITION_MURMUR2",
                                   PARTITION_MURMUR2) < 0
        || PyModule_AddIntConstant(module, "PARTITION_CRC32",
                                   PARTITION_CRC32) < 0)
    {
        return -1;
    }
    return 0;
}
