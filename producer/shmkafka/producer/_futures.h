/*
 * The futures' C types, shared by the tracker (_tracker.c, which makes and
 * completes them) and the delivery-report server (_reports.c, which reads
 * them): BatchWait, this process's records in one generation of one batch,
 * and FutureBase, a record's facts and its batch's wait.
 */
#ifndef SHMKAFKA_FUTURES_H
#define SHMKAFKA_FUTURES_H

#include <Python.h>
#include <stdint.h>

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

extern PyTypeObject BatchWaitType;
extern PyTypeObject FutureBaseType;

/* The index of the wait's completion covering ``delta``, or -1. */
Py_ssize_t outcome_index(BatchWait *wait, uint32_t delta);

#endif
