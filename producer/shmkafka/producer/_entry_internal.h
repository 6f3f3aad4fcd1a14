/*
 * The C entry's parts, shared by its files (and by no other extension):
 * _entry.c (send, produce and _fast_append, the types and the module) and
 * _entry_switch.c (turning an entry on and off: _fast_enable, _fast_guard,
 * _fast_disable). The Python twins are producer/entry.py's bases.
 */
#ifndef SHMKAFKA_ENTRY_INTERNAL_H
#define SHMKAFKA_ENTRY_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <time.h>

#include "_append.h"
#include "_tracker.h"

/* partitioners (what the facade passes to _fast_enable; entry.py's codes) */
#define PARTITION_MURMUR2 1     /* Java's / kafka-python's, murmur2_random */
#define PARTITION_CRC32 2       /* librdkafka's consistent_random */

typedef struct {
    PyObject_HEAD
    PyObject *tracker;      /* NULL: every call takes the Python path */
    PyObject *fast, *routes;
    PyObject *on_delivery;  /* produce: the configured callback, or None */
    PyObject *reports;      /* produce: reports queued, counted by len() */
    PyObject *unassigned;   /* produce: records waiting for metadata */
    Py_ssize_t size_precheck, max_messages;
    int partitioner;
    unsigned long generation;
    PyObject *guard_owner;          /* the buffer the guard word lives in */
    volatile const uint32_t *guard; /* NULL: no guard */
    uint32_t guard_value;
} Entry;

/* _entry.c */
extern const AppendAPI *append_api;    /* shmkafka.pool._append's */
extern const TrackerAPI *tracker_api;  /* shmkafka.producer._tracker's */
extern unsigned long fork_generation;  /* + 1 in every forked child */

/* _entry_switch.c: the entry bases' methods (see their docs) */
extern const char Entry_fast_enable__doc__[], Entry_fast_guard__doc__[];
int Entry_traverse(Entry *self, visitproc visit, void *arg);
int Entry_clear(Entry *self);
void Entry_dealloc(Entry *self);
PyObject *Entry_fast_enable(Entry *self, PyObject *const *args,
                            Py_ssize_t nargs);
PyObject *Entry_fast_guard(Entry *self, PyObject *const *args,
                           Py_ssize_t nargs);
PyObject *Entry_fast_disable(Entry *self, PyObject *ignored);
PyObject *Entry_fast_enabled(Entry *self, PyObject *ignored);

#endif
