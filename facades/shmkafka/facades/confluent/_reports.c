/*
 * Delivery reports of the confluent API (Producer.poll() and flush()): the
 * common future's report is served here, in C: its Message is made and its
 * callback called; anything else goes to the Python hook (its Python twin:
 * producer.py's _serve_report). The futures it reads are the tracker's
 * (producer/_tracker.c), reached through the tracker's capsule. The Message
 * is made by confluent-kafka's layout when reports.py found and checked it
 * (layout_message; its twin: the type's constructor), else by calling the
 * type.
 *
 * Rules: every function runs with the GIL held. A report is popped from the
 * left of its deque one at a time, so another thread may serve the same deque.
 *
 * The style is CPython's (PEP 7).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

#include "_tracker.h"

static const TrackerAPI *tracker_api;  /* shmkafka.producer._tracker's */

static PyObject *str_base_offset, *str_log_append_time, *str_first_delta;
static PyObject *empty_tuple, *create_time;

/* Where confluent-kafka's C Message keeps the fields a delivered report sets,
 * found and checked by reports.py (message_layout: one of the layouts it
 * knows, checked against the type's own constructor); type NULL: none in
 * use, the constructor makes every Message. Its constructor parses nine
 * arguments by keyword rules: a third of the cost of serving a report. */
typedef struct {
    PyTypeObject *type;  /* strong */
    PyObject *defaults;  /* strong, bytes of tp_basicsize: what the constructor
                          * sets whatever its arguments, the fields zero */
    Py_ssize_t topic, partition, offset, key, value, tstype, timestamp, latency;
    int none_is_null;    /* a None key or value is kept as NULL */
} MessageLayout;

static MessageLayout layout;

#define OFFSET_INVALID (-1001)  /* librdkafka's RD_KAFKA_OFFSET_INVALID */

static void
put_object(char *base, Py_ssize_t at, PyObject *value, int none_is_null)
{
    PyObject *old;

    memcpy(&old, base + at, sizeof(old));
    PyObject *stored = value == Py_None && none_is_null
        ? NULL : Py_NewRef(value);
    memcpy(base + at, &stored, sizeof(stored));
    Py_XDECREF(old);
}

static void
put_i32(char *base, Py_ssize_t at, int32_t value)
{
    memcpy(base + at, &value, sizeof(value));
}

static void
put_i64(char *base, Py_ssize_t at, int64_t value)
{
    memcpy(base + at, &value, sizeof(value));
}

/* A Message made as the type's constructor makes it from (topic,
 * partition, offset, key, value, None, None, (tstype, timestamp),
 * latency): its tp_new, then the fields written where the layout says,
 * each as the constructor keeps it (a negative partition as -1, offset as
 * OFFSET_INVALID, latency as -1: the accessors' None). NULL without an
 * exception: tp_new made another type's object (the caller constructs). */
static PyObject *
layout_message(const MessageLayout *in_use, PyObject *topic, int partition,
               long long offset, PyObject *key, PyObject *value, int tstype,
               long long timestamp, double latency)
{
    /* a copy, its objects held: tp_new may collect garbage, so run any
     * thread, which may change the layout in use meanwhile */
    MessageLayout at = *in_use;
    Py_INCREF(at.type);
    Py_INCREF(at.defaults);
    PyObject *message = at.type->tp_new(at.type, empty_tuple, NULL);

    if (message != NULL && !Py_IS_TYPE(message, at.type)) {
        Py_CLEAR(message);
    }
    if (message != NULL) {
        char *base = (char *)message;
        memcpy(base + sizeof(PyObject),
               PyBytes_AS_STRING(at.defaults) + sizeof(PyObject),
               (size_t)at.type->tp_basicsize - sizeof(PyObject));
        put_object(base, at.topic, topic, at.none_is_null);
        put_object(base, at.key, key, at.none_is_null);
        put_object(base, at.value, value, at.none_is_null);
        put_i32(base, at.partition, partition < 0 ? -1 : partition);
        put_i64(base, at.offset, offset < 0 ? OFFSET_INVALID : offset);
        put_i32(base, at.tstype, tstype);
        put_i64(base, at.timestamp, timestamp);
        put_i64(base, at.latency,
                latency < 0 ? -1 : (int64_t)(latency * 1000000.0));
    }
    Py_DECREF(at.type);
    Py_DECREF(at.defaults);
    return message;
}

typedef struct {
    PyObject *completion;   /* borrowed: the last one read */
    long long base_offset, log_append_time, first_delta;
} CompletionFacts;

static int
completion_facts(PyObject *completion, CompletionFacts *out)
{
    if (completion == out->completion) {
        return 0;  /* (a batch's futures share their completion) */
    }
    PyObject *names[3] = {str_base_offset, str_log_append_time,
                          str_first_delta};
    long long *fields[3] = {&out->base_offset, &out->log_append_time,
                            &out->first_delta};
    for (int i = 0; i < 3; i++) {
        PyObject *value = PyObject_GetAttr(completion, names[i]);
        if (value == NULL) {
            return -1;
        }
        *fields[i] = PyLong_AsLongLong(value);
        Py_DECREF(value);
        if (*fields[i] == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    out->completion = completion;
    return 0;
}

/* The (callback, Message) of a delivered future, or NULL: an error, or
 * (without an exception) a future the Python hook serves. */
static PyObject *
delivered_message(PyObject *item, PyObject *message_type, double now,
                  CompletionFacts *facts, PyObject **callback)
{
    if (!PyObject_TypeCheck(item, tracker_api->future_base_type)) {
        return NULL;
    }
    FutureBase *future = (FutureBase *)item;
    PyObject *report = future->report;
    if (future->wait == NULL || !Py_IS_TYPE(future->wait, tracker_api->batch_wait_type)
        || report == NULL || !PyTuple_CheckExact(report)
        || PyTuple_GET_SIZE(report) != 4
        || !PyFloat_CheckExact(PyTuple_GET_ITEM(report, 3)))
    {
        return NULL;
    }
    BatchWait *wait = (BatchWait *)future->wait;
    Py_ssize_t i = tracker_api->outcome_index(wait, future->offset_delta);
    if (i < 0) {
        return NULL;
    }
    PyObject *outcome = PyList_GET_ITEM(wait->completions, i);
    if (PyTuple_GET_ITEM(outcome, 1) != Py_None
        || completion_facts(PyTuple_GET_ITEM(outcome, 0), facts) < 0)
    {
        return NULL;  /* failed: the Python hook reports its error */
    }
    long long offset = facts->base_offset < 0
        ? -1 : facts->base_offset + future->offset_delta - facts->first_delta;
    long long timestamp = facts->log_append_time >= 0
        ? facts->log_append_time : future->timestamp;
    double latency = now - PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(report, 3));
    *callback = PyTuple_GET_ITEM(report, 0);
    if (message_type == (PyObject *)layout.type) {
        PyObject *made = layout_message(&layout, future->topic,
                                        (int)future->partition, offset,
                                        PyTuple_GET_ITEM(report, 1),
                                        PyTuple_GET_ITEM(report, 2), 1,
                                        timestamp, latency);  /* CREATE_TIME */
        if (made != NULL || PyErr_Occurred()) {
            return made;
        }
    }
    PyObject *stamp = NULL, *timestamp_obj = PyLong_FromLongLong(timestamp);
    if (timestamp_obj != NULL) {
        stamp = PyTuple_Pack(2, create_time, timestamp_obj);
        Py_DECREF(timestamp_obj);
    }
    PyObject *offset_obj = PyLong_FromLongLong(offset);
    PyObject *partition = PyLong_FromSsize_t(future->partition);
    PyObject *latency_obj = PyFloat_FromDouble(latency);
    PyObject *message = NULL;
    if (stamp && offset_obj && partition && latency_obj) {
        /* Message(topic, partition, offset, key, value, headers, error,
         * timestamp, latency): confluent-kafka's positional order */
        PyObject *fields[9] = {
            future->topic, partition, offset_obj, PyTuple_GET_ITEM(report, 1),
            PyTuple_GET_ITEM(report, 2), Py_None, Py_None, stamp, latency_obj,
        };
        message = PyObject_Vectorcall(message_type, fields, 9, NULL);
    }
    Py_XDECREF(stamp);
    Py_XDECREF(offset_obj);
    Py_XDECREF(partition);
    Py_XDECREF(latency_obj);
    return message;
}

PyDoc_STRVAR(serve_reports__doc__,
"serve_reports($module, reports, message_type, serve_other, /)\n"
"--\n"
"\n"
"Pop every report of the deque and call its callback(error, Message): a\n"
"delivered future's here, anything else through serve_other(item), which\n"
"returns what its callback raised. Every callback runs even if one raises\n"
"(an Exception); returns (reports served, the last exception or None).");

static PyObject *
serve_reports(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError,
                     "serve_reports() takes exactly 3 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    PyObject *reports = args[0], *message_type = args[1];
    PyObject *serve_other = args[2];
    PyObject *popleft = PyObject_GetAttrString(reports, "popleft");
    PyObject *raised = Py_NewRef(Py_None);
    CompletionFacts facts = {NULL, 0, 0, 0};
    Py_ssize_t served = 0;
    double now = monotonic_s();

    if (popleft == NULL) {
        Py_DECREF(raised);
        return NULL;
    }
    while (PyObject_Length(reports) > 0) {
        PyObject *item = PyObject_CallNoArgs(popleft);
        if (item == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_IndexError)) {
                goto error;
            }
            PyErr_Clear();  /* (emptied by another thread meanwhile) */
            break;
        }
        served++;
        PyObject *callback = Py_None;
        PyObject *message = delivered_message(item, message_type, now, &facts,
                                              &callback);
        PyObject *result;
        if (message != NULL) {
            PyObject *call_args[2] = {Py_None, message};
            result = callback == Py_None
                ? Py_NewRef(Py_None)
                : PyObject_Vectorcall(callback, call_args, 2, NULL);
            Py_DECREF(message);
        }
        else if (PyErr_Occurred()) {
            result = NULL;
        }
        else {
            result = PyObject_CallOneArg(serve_other, item);
            if (result != NULL && result != Py_None) {
                Py_SETREF(raised, result);  /* what its callback raised */
                result = Py_NewRef(Py_None);
            }
        }
        Py_DECREF(item);
        if (result == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) {
                goto error;  /* (KeyboardInterrupt, SystemExit: at once) */
            }
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyErr_NormalizeException(&type, &value, &traceback);
            if (traceback != NULL && value != NULL) {
                PyException_SetTraceback(value, traceback);
            }
            Py_XDECREF(type);
            Py_XDECREF(traceback);
            Py_SETREF(raised, value != NULL ? value : Py_NewRef(Py_None));
            continue;
        }
        Py_DECREF(result);
    }
    Py_DECREF(popleft);
    PyObject *out = Py_BuildValue("(nN)", served, raised);
    return out;

error:
    Py_DECREF(popleft);
    Py_DECREF(raised);
    return NULL;
}

PyDoc_STRVAR(use_message_layout__doc__,
"use_message_layout($module, type, offsets, none_is_null, defaults, /)\n"
"--\n"
"\n"
"Make the delivered report's Message of ``type`` by writing its fields at\n"
"``offsets`` (topic, partition, offset, key, value, tstype, timestamp,\n"
"latency: reports.py's message_layout) after its tp_new and ``defaults``\n"
"(its tp_basicsize bytes, past the object's head); ``type`` None:\n"
"by calling the type, as for any other.");

static int
offset_fits(PyTypeObject *type, Py_ssize_t at, Py_ssize_t width)
{
    return at >= (Py_ssize_t)sizeof(PyObject) && at % width == 0
           && at + width <= type->tp_basicsize;
}

static PyObject *
use_message_layout(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static const Py_ssize_t widths[8] = {
        sizeof(PyObject *), 4, 8, sizeof(PyObject *), sizeof(PyObject *),
        4, 8, 8,
    };
    Py_ssize_t at[8];

    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "use_message_layout() takes exactly 4 arguments");
        return NULL;
    }
    if (args[0] == Py_None) {
        Py_CLEAR(layout.type);
        Py_CLEAR(layout.defaults);
        Py_RETURN_NONE;
    }
    if (!PyType_Check(args[0]) || !PyTuple_Check(args[1])
        || PyTuple_GET_SIZE(args[1]) != 8 || !PyBytes_CheckExact(args[3])
        || PyBytes_GET_SIZE(args[3])
           != ((PyTypeObject *)args[0])->tp_basicsize)
    {
        PyErr_SetString(PyExc_TypeError, "use_message_layout() takes a "
                        "type, 8 offsets, a flag and its size of bytes");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    for (int i = 0; i < 8; i++) {
        at[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[1], i));
        if (at[i] == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (!offset_fits(type, at[i], widths[i])) {
            PyErr_Format(PyExc_ValueError,
                         "offset %zd is not a field of %s", at[i],
                         type->tp_name);
            return NULL;
        }
    }
    for (int i = 0; i < 8; i++) {
        for (int j = i + 1; j < 8; j++) {
            if (at[i] < at[j] + widths[j] && at[j] < at[i] + widths[i]) {
                PyErr_Format(PyExc_ValueError, "fields at %zd and %zd overlap",
                             at[i], at[j]);
                return NULL;
            }
        }
    }
    if (type->tp_new == NULL || type->tp_itemsize != 0) {
        PyErr_Format(PyExc_ValueError, "%s is not a fixed-size type",
                     type->tp_name);
        return NULL;
    }
    int none_is_null = PyObject_IsTrue(args[2]);
    if (none_is_null < 0) {
        return NULL;
    }
    Py_XSETREF(layout.defaults, Py_NewRef(args[3]));
    Py_XSETREF(layout.type, (PyTypeObject *)Py_NewRef(type));
    layout.topic = at[0];
    layout.partition = at[1];
    layout.offset = at[2];
    layout.key = at[3];
    layout.value = at[4];
    layout.tstype = at[5];
    layout.timestamp = at[6];
    layout.latency = at[7];
    layout.none_is_null = none_is_null;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(layout_message__doc__,
"layout_message($module, topic, partition, offset, key, value, tstype,\n"
"               timestamp, latency, /)\n"
"--\n"
"\n"
"The Message the layout makes (its twin: the type's constructor, with\n"
"headers and error None and the timestamp (tstype, timestamp)).");

static PyObject *
layout_message_py(PyObject *module, PyObject *args)
{
    PyObject *topic, *key, *value;
    long long offset, timestamp;
    int partition, tstype;
    double latency;

    if (!PyArg_ParseTuple(args, "UiLOOiLd:layout_message", &topic, &partition,
                          &offset, &key, &value, &tstype, &timestamp,
                          &latency))
    {
        return NULL;
    }
    if (layout.type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no Message layout in use");
        return NULL;
    }
    PyObject *made = layout_message(&layout, topic, partition, offset, key,
                                    value, tstype, timestamp, latency);
    if (made == NULL && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_RuntimeError, "tp_new made another type");
    }
    return made;
}

static PyMethodDef report_functions[] = {
    {"serve_reports", (PyCFunction)(void (*)(void))serve_reports,
     METH_FASTCALL, serve_reports__doc__},
    {"use_message_layout", (PyCFunction)(void (*)(void))use_message_layout,
     METH_FASTCALL, use_message_layout__doc__},
    {"layout_message", (PyCFunction)layout_message_py, METH_VARARGS,
     layout_message__doc__},
    {NULL, NULL, 0, NULL}
};

static int
reports_exec(PyObject *module)
{
    if ((tracker_api = import_tracker_api()) == NULL) {
        return -1;
    }
    if ((str_base_offset == NULL
         && (str_base_offset = PyUnicode_InternFromString("base_offset"))
            == NULL)
        || (str_log_append_time == NULL
            && (str_log_append_time =
                    PyUnicode_InternFromString("log_append_time")) == NULL)
        || (str_first_delta == NULL
            && (str_first_delta = PyUnicode_InternFromString("first_delta"))
               == NULL))
    {
        return -1;
    }
    if ((empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL)
        || (create_time == NULL && (create_time = PyLong_FromLong(1)) == NULL))
    {
        return -1;
    }
    return PyModule_AddFunctions(module, report_functions);
}

static PyModuleDef_Slot reports_slots[] = {
    {Py_mod_exec, reports_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters,
     Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL}
};

static struct PyModuleDef reports_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shmkafka.facades.confluent._reports",
    .m_doc = "The confluent API's delivery reports in C.",
    .m_size = 0,
    .m_slots = reports_slots,
};

PyMODINIT_FUNC
PyInit__reports(void)
{
    return PyModuleDef_Init(&reports_module);
}
