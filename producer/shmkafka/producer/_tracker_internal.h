/*
 * The parts of shmkafka.producer._tracker, shared by its files (and by no
 * other extension): _tracker.c (Tracker: registering records, the capsule,
 * the module), _tracker_futures.c (BatchWait and Future), _tracker_complete.c
 * (Tracker: completing, listing and forgetting waits), and the facades' C
 * entries that send through it: _tracker_entry.c (send, produce and
 * _fast_append) and _tracker_entry_switch.c (_fast_enable, _fast_guard,
 * _fast_disable). The Python twins: producer/futures.py and producer/entry.py.
 * (One extension: a send crosses no extension but the append's.)
 */
#ifndef SHMKAFKA_TRACKER_INTERNAL_H
#define SHMKAFKA_TRACKER_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
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
    PyObject *on_came_first;  /* called with a reported future done at registration */
    PyObject *waits;        /* {registration: BatchWait} */
    Py_ssize_t outstanding;
    CacheEntry cache[CACHE_SIZE];
} Tracker;

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

/* _tracker_futures.c */
extern PyTypeObject BatchWaitType, FutureBaseType;
extern Py_ssize_t live_futures;     /* made and not yet freed (for tests) */
extern PyMethodDef futures_functions[];
int grow(uint32_t **array, Py_ssize_t *cap, Py_ssize_t need);
BatchWait *batchwait_new(PyObject *cond);
Py_ssize_t outcome_index(BatchWait *wait, uint32_t delta);
int delta_arg(PyObject *arg, uint32_t *out);

/* _tracker.c */
extern const AppendAPI *append_api;    /* shmkafka.pool._append's */
/* What tracker_send says when it wrote nothing, for Python's one path
 * (producer/futures.py's verdict_of, its twin): p >= 0 partition p needs a
 * new batch; VERDICT_BUSY - p partition p's stripe was taken; VERDICT_RESOLVE
 * the record is resolved anew (the directory moved, or input C leaves). */
#define VERDICT_RESOLVE (-1)
#define VERDICT_BUSY (-2)
extern PyTypeObject TrackerType;
void clear_cache(Tracker *self);
BatchWait *wait_for(Tracker *self, uint64_t registration);
PyObject *tracker_send(PyObject *tracker, PyObject *fast, PyObject *route,
                       PyObject *topic, Py_ssize_t partition, PyObject *key,
                       PyObject *value, PyObject *report, int want_future);
PyObject *tracker_send_headers(PyObject *tracker, PyObject *fast,
                               PyObject *route, PyObject *topic,
                               Py_ssize_t partition, PyObject *key,
                               PyObject *value, PyObject *headers,
                               Py_ssize_t header_budget, PyObject *report,
                               int want_future);
Py_ssize_t tracker_outstanding(PyObject *tracker);

/* _tracker_entry.c: adds the entry bases to the module */
extern unsigned long fork_generation;  /* + 1 in every forked child */
int entry_exec(PyObject *module);

/* _tracker_entry_switch.c: the entry bases' methods (see their docs) */
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

/* _tracker_complete.c: Tracker's methods (see their docs) */
extern const char Tracker_complete__doc__[];
PyObject *Tracker_complete(Tracker *self, PyObject *const *args,
                           Py_ssize_t nargs);
PyObject *Tracker_pending(Tracker *self, PyObject *ignored);
PyObject *Tracker_retire(Tracker *self, PyObject *arg);
PyObject *Tracker_clear(Tracker *self, PyObject *ignored);

#endif
