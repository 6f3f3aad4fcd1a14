/*
 * What the extension's four parts share: the append fast path
 * (_fastappend.c), the futures of a send (_tracker.c, which calls the append
 * and registers the record in one step), the confluent API's delivery
 * reports (_reports.c) and the facades' C entries (_entry.c).
 */
#ifndef SHMKAFKA_FASTAPPEND_H
#define SHMKAFKA_FASTAPPEND_H

#include <Python.h>
#include <stdint.h>
#include <time.h>

typedef struct FastAppend FastAppend;

extern PyTypeObject FastAppendType;

#define BUSY 0              /* the stripe is taken: Python waits for it */
#define APPENDED 1
#define NEEDS_NEW_BATCH 2   /* no open batch with room: Python opens one */
#define SEND_SLOW 3         /* the directory moved, or input Python handles */

typedef struct {
    uint32_t batch_id, generation, offset_delta;
    int full, new_batch, wake;
    uint64_t queued;
} Hit;

typedef struct {
    Hit hit;
    Py_ssize_t partition;   /* the record's, chosen or given */
    int64_t timestamp;      /* its create time, wall-clock ms */
} SendResult;

/* FastAppend.send_kv's work (see its doc): APPENDED, NEEDS_NEW_BATCH,
 * SEND_SLOW, or -1 with an exception set. */
int fastappend_send_kv(PyObject *fast, PyObject *route, Py_ssize_t partition,
                       PyObject *key, PyObject *value, SendResult *out);

/* The sticky partition of the route's topic for keyless records (recorded
 * in its partition 0's deque), or -1 when there is none yet. */
Py_ssize_t fastappend_sticky(PyObject *fast, PyObject *route);

/* time.monotonic(), in seconds: the report's start and its latency. */
static inline double
monotonic_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Kafka's murmur2 of a bytes key (the Java client's). */
uint32_t fastappend_murmur2(PyObject *key);

/* _tracker.c: Tracker.send's work (see its doc), and the records pending. */
extern PyTypeObject TrackerType;
PyObject *tracker_send(PyObject *tracker, PyObject *fast, PyObject *route,
                       PyObject *topic, Py_ssize_t partition, PyObject *key,
                       PyObject *value, PyObject *report, int want_future);
Py_ssize_t tracker_outstanding(PyObject *tracker);

/* Add each part's types to the module. */
int tracker_exec(PyObject *module);
int reports_exec(PyObject *module);
int entry_exec(PyObject *module);

#endif
