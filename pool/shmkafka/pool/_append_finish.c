/*
 * The Sender's finish of the batches a produce response acknowledged, in
 * one call a response (FastAppend.finish_sent). Python twin and reference:
 * pool/finishing.py's finish_sent, which the Sender calls where this one
 * cannot serve.
 *
 * Part of the _append extension (_append_internal.h).
 *
 * For each acknowledged batch, as Sender.finish does for a success: its
 * result (rings.ring_entry's entry, for the batch or, split from a larger
 * one, for its parent's records in its delta range) posted to every process
 * that appended to it; then, unless a ring was full, its descriptor FREE
 * and its slab run returned to the caller, which frees the runs and wakes
 * the slots once the round's posts are done (defer_wakes). A batch this
 * code does not finish is left to the caller's Python path, which fails it
 * (a descriptor that no longer holds a batch: BatchTable.problem's checks,
 * or one not IN_FLIGHT at the generation sent) or counts it (recovered).
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"

enum { RECORD_BATCH_HEADER = 61 };
#define ALL_DELTAS UINT32_MAX

typedef struct {
    int64_t batch_id, generation, base_offset, append_time, log_start;
} Acked;

static int
parse_acked(FastAppend *self, PyObject *row, Acked *a)
{
    static const char fname[] = "finish_sent";

    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 5) {
        bad_argument(fname, "row", "a tuple of 5 ints", row);
        return -1;
    }
    int64_t *fields[] = {&a->batch_id, &a->generation, &a->base_offset,
                         &a->append_time, &a->log_start};
    for (Py_ssize_t i = 0; i < 5; i++) {
        if (int64_arg(fname, "row", PyTuple_GET_ITEM(row, i), fields[i]) < 0) {
            return -1;
        }
    }
    if (a->batch_id < 0 || a->batch_id >= self->num_slabs) {
        PyErr_Format(PyExc_ValueError, "%s(): no batch %lld", fname,
                     (long long)a->batch_id);
        return -1;
    }
    return 0;
}

/* Whether the descriptor holds the batch sent, whole: IN_FLIGHT at its
 * generation, not recovered, and sound by BatchTable.problem's checks. */
static int
finishable(FastAppend *self, const char *b, const Acked *a,
           Py_ssize_t deques_used)
{
    uint32_t first = rd32(b + self->b_first_slab);
    uint32_t count = rd32(b + self->b_slab_count);
    uint32_t write_pos = rd32(b + self->b_write_pos);
    uint32_t records = rd32(b + self->b_record_count);
    uint32_t parent = rd32(b + self->b_parent);
    uint64_t delta = rd32(b + self->b_parent_delta);

    return (rd32(b + self->b_state) == (uint32_t)self->in_flight_state
            && rd32(b + self->b_generation) == (uint64_t)a->generation
            && rd32(b + self->b_recovered) == 0
            && first == (uint64_t)a->batch_id
            && count >= 1 && count <= self->num_slabs - a->batch_id
            && write_pos > RECORD_BATCH_HEADER
            && write_pos <= (uint64_t)count * (uint64_t)self->slab_size
            && records >= 1 && records <= write_pos - RECORD_BATCH_HEADER
            && rd32(b + self->b_deque) < (uint64_t)deques_used
            && (parent == (uint32_t)self->no_parent
                || (parent < self->num_slabs
                    && delta + records < ((uint64_t)1 << 31))));
}

static int32_t
clamp_ms(int64_t ms)
{
    return (int32_t)(ms < -1 ? -1 : ms > INT32_MAX ? INT32_MAX : ms);
}

/* The batch's result as rings.ring_entry packs it (Sender.completion_for,
 * with the Sender's view of its last request). */
static void
pack_entry(FastAppend *self, const char *b, const Acked *a, int32_t node,
           int64_t sent_ms, int64_t took_ms, char *e)
{
    uint32_t parent = rd32(b + self->b_parent);
    uint32_t attempts = rd32(b + self->b_attempts);
    uint16_t code = 0, shown = attempts >= 0xFFFF ? 0xFFFF : attempts + 1;
    uint32_t first = 0, last = ALL_DELTAS;

    memset(e, 0, ENTRY_SIZE);
    if (parent == (uint32_t)self->no_parent) {
        wr32(e + E_BATCH, (uint32_t)a->batch_id);
        wr32(e + E_GENERATION, (uint32_t)a->generation);
    }
    else {
        wr32(e + E_BATCH, parent);
        wr32(e + E_GENERATION, rd32(b + self->b_parent_generation));
        first = rd32(b + self->b_parent_delta);
        last = first + rd32(b + self->b_record_count) - 1;
    }
    wr64(e + E_BASE, (uint64_t)a->base_offset);
    wr64(e + E_APPEND, (uint64_t)a->append_time);
    wr64(e + E_START, (uint64_t)a->log_start);
    memcpy(e + E_CODE, &code, sizeof(code));
    memcpy(e + E_ATTEMPTS, &shown, sizeof(shown));
    wr32(e + E_FIRST, first);
    wr32(e + E_LAST, last);
    wr32(e + E_NODE, (uint32_t)node);
    int64_t queued = sent_ms - (int64_t)rd64(b + self->b_created);
    wr32(e + E_QUEUED, (uint32_t)clamp_ms(queued));
    wr32(e + E_REQUEST, (uint32_t)clamp_ms(took_ms));
}

typedef struct {
    PyObject *posted, *full, *left, *runs;
} Finished;

/* One acknowledged batch (row `i`): posted, and freed unless a ring was
 * full; or left to the caller. */
static int
finish_one(FastAppend *self, Finished *out, Py_ssize_t i, const Acked *a,
           int32_t node, int64_t sent_ms, int64_t took_ms,
           Py_ssize_t deques_used)
{
    char *b = batch_at(self, (uint32_t)a->batch_id);
    char entry[ENTRY_SIZE];

    if (!finishable(self, b, a, deques_used)) {
        return append_new(out->left, PyLong_FromSsize_t(i));
    }
    pack_entry(self, b, a, node, sent_ms, took_ms, entry);
    PyObject *full = PyList_New(0);
    const unsigned char *bits = (const unsigned char *)self->view.buf
                                + self->appenders_at
                                + a->batch_id * self->appenders_size;
    if (full == NULL
        || post_to_appenders(self, bits, entry, out->posted, full) < 0)
    {
        Py_XDECREF(full);
        return -1;
    }
    if (PyList_GET_SIZE(full) > 0) {  /* (not freed: posted again later) */
        return append_new(out->full, Py_BuildValue("(nN)", i, full));
    }
    Py_DECREF(full);
    store_release32(b + self->b_state, (uint32_t)self->free_state);
    return append_new(out->runs,
                      Py_BuildValue("(kk)", (unsigned long)a->batch_id,
                                    (unsigned long)rd32(b + self->b_slab_count)));
}

/* FastAppend.finish_sent(rows, node, sent_ms, took_ms, deques_used): see
 * _append.pyi. */
PyObject *
FastAppend_finish_sent(FastAppend *self, PyObject *const *args,
                       Py_ssize_t nargs)
{
    static const char fname[] = "finish_sent";
    int64_t node, sent_ms, took_ms;
    Py_ssize_t deques_used;

    if (check_open(self, fname) < 0 || check_nargs(fname, nargs, 5) < 0
        || int64_arg(fname, "node", args[1], &node) < 0
        || int64_arg(fname, "sent_ms", args[2], &sent_ms) < 0
        || int64_arg(fname, "took_ms", args[3], &took_ms) < 0
        || ssize_arg(fname, "deques_used", args[4], &deques_used) < 0)
    {
        return NULL;
    }
    if (!PyList_Check(args[0])) {
        bad_argument(fname, "rows", "list", args[0]);
        return NULL;
    }
    if (node < INT32_MIN || node > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s(): node %lld is out of range",
                     fname, (long long)node);
        return NULL;
    }
    Finished out = {PyList_New(0), PyList_New(0), PyList_New(0),
                    PyList_New(0)};
    int failed = (out.posted == NULL || out.full == NULL || out.left == NULL
                  || out.runs == NULL);
    PyObject *rows = args[0];
    for (Py_ssize_t i = 0; !failed && i < PyList_GET_SIZE(rows); i++) {
        Acked a;
        failed = (parse_acked(self, PyList_GET_ITEM(rows, i), &a) < 0
                  || finish_one(self, &out, i, &a, (int32_t)node, sent_ms,
                                took_ms, deques_used) < 0);
    }
    if (failed) {
        Py_XDECREF(out.posted);
        Py_XDECREF(out.full);
        Py_XDECREF(out.left);
        Py_XDECREF(out.runs);
        return NULL;
    }
    return Py_BuildValue("(NNNN)", out.posted, out.full, out.left, out.runs);
}
