/*
 * The C append's interface for the other C parts (producer/_tracker.c and
 * its _tracker_entry.c), which are an extension of their own: they reach it
 * through a capsule (import_append_api), never by linking to it, so each
 * extension depends only on those below it (pool <- producer <- facades).
 *
 * _append.c is the C twin of accumulator.py's append (the reference).
 */
#ifndef SHMKAFKA_APPEND_H
#define SHMKAFKA_APPEND_H

#include <Python.h>
#include <stdint.h>

#define BUSY 0              /* the stripe is taken: Python waits for it */
#define APPENDED 1
#define NEEDS_NEW_BATCH 2   /* no open batch with room: Python opens one */
#define SEND_SLOW 3         /* the directory moved, or input Python handles */
#define DIR_MOVED 4         /* (fast_append) the directory moved: resolve again */

typedef struct {
    uint32_t batch_id, generation, offset_delta;
    int full, new_batch, wake;
    uint64_t queued;
} Hit;

typedef struct {
    Hit hit;
    Py_ssize_t partition;   /* the record's, chosen or given */
    int64_t timestamp;      /* its create time, wall-clock ms */
    Py_ssize_t header_size; /* its headers' keys and values in bytes; -1: none */
} SendResult;

/* The most headers a record may have to take the C path (more: Python's). */
#define MAX_C_HEADERS 8
/* A header's room in records.py's record_size_bound (its two lengths). */
#define HEADER_ROOM 10

typedef struct {
    PyTypeObject *fast_append_type;
    /* FastAppend.send_kv's work (see its doc), headers included (NULL or
     * None: none; else a list of at most MAX_C_HEADERS (str, bytes or None)
     * pairs whose size bound, HEADER_ROOM bytes each plus their keys and
     * values, stays under header_budget; anything else SEND_SLOW):
     * APPENDED, NEEDS_NEW_BATCH or BUSY (both with out->partition), SEND_SLOW,
     * or -1 with an exception set. */
    int (*send_kv)(PyObject *fast, PyObject *route, Py_ssize_t partition,
                   PyObject *key, PyObject *value, PyObject *headers,
                   Py_ssize_t header_budget, SendResult *out);
    /* The sticky partition of the route's topic for keyless records
     * (recorded in its partition 0's deque), or -1 when there is none yet. */
    Py_ssize_t (*sticky)(PyObject *fast, PyObject *route);
} AppendAPI;

#define APPEND_API_CAPSULE "shmkafka.pool._append._API"

/* Publish an extension's API (a static table) as its module's ``_API``
 * capsule named ``name`` (a string literal): 0, or -1 with an exception.
 * Every extension that others reach publishes its API this way. */
static inline int
add_api_capsule(PyObject *module, const void *api, const char *name)
{
    PyObject *capsule = PyCapsule_New((void *)api, name, NULL);

    if (capsule == NULL) {
        return -1;
    }
    if (PyModule_AddObject(module, "_API", capsule) < 0) {
        Py_DECREF(capsule);
        return -1;
    }
    return 0;
}

/* The API table another extension publishes as ``module``'s ``_API`` capsule
 * named ``capsule``, or NULL with an exception. (PyCapsule_Import imports only
 * the package: the module is imported first.) */
static inline const void *
import_api(const char *module, const char *capsule)
{
    PyObject *imported = PyImport_ImportModule(module);

    if (imported == NULL) {
        return NULL;
    }
    Py_DECREF(imported);
    return PyCapsule_Import(capsule, 0);
}

/* The API of shmkafka.pool._append (imported), or NULL with an exception. */
static inline const AppendAPI *
import_append_api(void)
{
    return (const AppendAPI *)import_api("shmkafka.pool._append",
                                         APPEND_API_CAPSULE);
}

#endif
