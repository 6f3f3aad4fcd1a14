/*
 * The tracker's interface for the C part above it (the confluent facade's
 * _reports.c), an extension of its own that reaches it through a capsule
 * (import_tracker_api), never by linking to it.
 * The futures' C types: BatchWait, this process's records in one generation
 * of one batch, and FutureBase, a record's facts and its batch's wait.
 *
 * _tracker.c is the C twin of futures.py (the reference).
 */
#ifndef SHMKAFKA_TRACKER_H
#define SHMKAFKA_TRACKER_H

#include <Python.h>
#include <stdint.h>
#include <time.h>

#include "_append.h"  /* (import_api) */

typedef struct {
    PyObject_HEAD
    PyObject *cond;
    PyObject *completions;  /* [(Completion, error or None)] */
    PyObject *listed;       /* [Future]: those a report or callback awaits */
    uint32_t *ranges;       /* first, last delta of each completion */
    Py_ssize_t cap_ranges;
    uint32_t *deltas;       /* the pending records' offset deltas */
    Py_ssize_t n_deltas, cap_deltas;
    Py_ssize_t pending;
    double retire_at;
} BatchWait;

typedef struct {
    PyObject_HEAD
    PyObject *wait, *topic, *report, *callbacks;
    unsigned long long registration;
    long long timestamp;
    Py_ssize_t partition, key_size, value_size, header_size;
    unsigned int offset_delta;
    int flags;
} FutureBase;

typedef struct {
    PyTypeObject *tracker_type, *batch_wait_type, *future_base_type;
    /* Tracker.send's work (see its doc). */
    PyObject *(*send)(PyObject *tracker, PyObject *fast, PyObject *route,
                      PyObject *topic, Py_ssize_t partition, PyObject *key,
                      PyObject *value, PyObject *report, int want_future);
    /* The records pending. */
    Py_ssize_t (*outstanding)(PyObject *tracker);
    /* The index of the wait's completion covering ``delta``, or -1. */
    Py_ssize_t (*outcome_index)(BatchWait *wait, uint32_t delta);
} TrackerAPI;

#define TRACKER_API_CAPSULE "shmkafka.producer._tracker._API"

/* The API of shmkafka.producer._tracker (imported), or NULL with an
 * exception. */
static inline const TrackerAPI *
import_tracker_api(void)
{
    return (const TrackerAPI *)import_api("shmkafka.producer._tracker",
                                          TRACKER_API_CAPSULE);
}

/* time.monotonic(), in seconds: a report's start and its latency. */
static inline double
monotonic_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
