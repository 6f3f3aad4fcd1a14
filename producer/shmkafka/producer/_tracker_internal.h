/*
 * The tracker's parts, shared by its files (and by no other extension):
 * _tracker.c (Tracker: registering records, the capsule, the module),
 * _tracker_futures.c (BatchWait and Future) and _tracker_complete.c (Tracker:
 * completing, listing and forgetting waits). The Python twin of the whole is
 * producer/futures.py.
 */
#ifndef SHMKAFKA_TRACKER_INTERNAL_H
#define SHMKAFKA_TRACKER_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

#include "_append.h"
#include "_tracker.h"

#define ALL_DELTAS 0xFFFFFFFFu
#define FLAG_FULL 1
#define FLAG_NEW_BATCH 2
#define FLAG_WAKE 4
#define CACHE_SIZE 1024     /* batch id -> its current wait, by id modulo */

typedef struct {
    uint64_t registration;
    BatchWait *wait;
} CacheEntry;

typedef struct {
    PyObject_HEAD
    PyObject *cond, *future_type, *on_batch;
    PyObject *waits;        /* {registration: BatchWait} */
    Py_ssize_t outstanding;
    CacheEntry cache[CACHE_SIZE];
} Tracker;

/* _tracker_futures.c */
extern PyTypeObject BatchWaitType, FutureBaseType;
extern Py_ssize_t live_futures;     /* made and not yet freed (for tests) */
extern PyMethodDef futures_functions[];
int grow(uint32_t **array, Py_ssize_t *cap, Py_ssize_t need);
BatchWait *batchwait_new(PyObject *cond);
Py_ssize_t outcome_index(BatchWait *wait, uint32_t delta);
int delta_arg(PyObject *arg, uint32_t *out);

/* _tracker.c */
void clear_cache(Tracker *self);
BatchWait *wait_for(Tracker *self, uint64_t registration);

/* _tracker_complete.c: Tracker's methods (see their docs) */
extern const char Tracker_complete__doc__[];
PyObject *Tracker_complete(Tracker *self, PyObject *const *args,
                           Py_ssize_t nargs);
PyObject *Tracker_pending(Tracker *self, PyObject *ignored);
PyObject *Tracker_retire(Tracker *self, PyObject *arg);
PyObject *Tracker_clear(Tracker *self, PyObject *ignored);

#endif
