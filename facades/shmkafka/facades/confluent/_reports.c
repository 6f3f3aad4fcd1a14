/*
 * Delivery reports of the confluent API (Producer.poll() and flush()): the
 * common future's report is served here, in C: its Message is made and its
 * callback called; anything else goes to the Python hook (its Python twin:
 * producer.py's _serve_report). The futures it reads are the tracker's
 * (producer/_tracker.c), reached through the tracker's capsule.
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
    PyObject *stamp = Py_BuildValue("(iL)", 1, timestamp);  /* CREATE_TIME */
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
    *callback = PyTuple_GET_ITEM(report, 0);
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
            result = callback == Py_None
                ? Py_NewRef(Py_None)
                : PyObject_CallFunctionObjArgs(callback, Py_None, message,
                                               NULL);
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

static PyMethodDef report_functions[] = {
    {"serve_reports", (PyCFunction)(void (*)(void))serve_reports,
     METH_FASTCALL, serve_reports__doc__},
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
