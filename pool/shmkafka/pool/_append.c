/*
 * The append fast path in C: choose the partition (send_kv: murmur2 of the
 * key, or the sticky partition), lock its stripe, append one framed record to
 * the last OPEN batch of its deque or, when that has no room, open a batch on
 * a run of free slabs (the pool lock taken under the stripe: a try-lock, in
 * the lock order of shm/lockdep.py), publish, unlock -- the same steps, in
 * the same order, as RecordAccumulator._try_append and _append_new_batch
 * under LockSet.acquire/release (its Python twin: pool/accumulator.py, and
 * shm/locks.py), which stay the reference and the fallback. The other C
 * parts call it through the capsule _append.h describes.
 *
 * Rules (as in locks.py and layout.py):
 * - The intent byte is set before the semaphore is taken and cleared after
 *   it is posted. If this process already shows intent for the stripe
 *   (another of its threads holds or wants it), or the semaphore is taken,
 *   we return None and Python takes the slow path.
 * - The record bytes are written before the publish fields (write_pos,
 *   record_count, max_timestamp, last_append_ms), which are written last.
 * - Every offset comes from layout.py through the constructor
 *   (fastpath.fast_path_offsets; the keys are listed in layout_fields): nothing
 *   here hard-codes the memory map, not even a field's place in its struct.
 *   The GIL is held throughout, so no other thread of this process
 *   interleaves.
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"

/* (batch_id, generation, offset_delta, batch_is_full, queued), or None. */
static PyObject *
hit_tuple(int appended, const Hit *hit)
{
    PyObject *items[5];

    if (appended < 0) {
        return NULL;
    }
    if (appended != APPENDED) {
        Py_RETURN_NONE;
    }
    items[0] = PyLong_FromUnsignedLong(hit->batch_id);
    items[1] = PyLong_FromUnsignedLong(hit->generation);
    items[2] = PyLong_FromUnsignedLong(hit->offset_delta);
    items[3] = PyLong_FromLong(hit->full);
    items[4] = PyLong_FromUnsignedLongLong(hit->queued);
    return tuple_of(&PyTuple_Type, items, Py_ARRAY_LENGTH(items));
}

/* The arguments append() and append_kv() share: deque_id and timestamp_ms
 * first, now_ms and version last. */
static inline int
append_args(FastAppend *self, const char *fname, PyObject *const *args,
            Py_ssize_t nargs, Py_ssize_t expected, Py_ssize_t *deque_id,
            int64_t *timestamp, int64_t *now_ms, int64_t *version)
{
    if (check_nargs(fname, nargs, expected) < 0
        || check_open(self, fname) < 0
        || ssize_arg(fname, "deque_id", args[0], deque_id) < 0
        || int64_arg(fname, "timestamp_ms", args[1], timestamp) < 0
        || int64_arg(fname, "now_ms", args[expected - 2], now_ms) < 0
        || int64_arg(fname, "version", args[expected - 1], version) < 0)
    {
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(FastAppend_append__doc__,
"append($self, deque_id, timestamp_ms, tail, now_ms, version, /)\n"
"--\n"
"\n"
"Append a record whose part after the offset delta (key, value and\n"
"headers, encoded) is tail, if the directory is still at version (the\n"
"one deque_id was resolved at; -1: unchecked). Returns (batch_id,\n"
"generation, offset_delta, batch_is_full, queued), or None: take the\n"
"slow path.");

static PyObject *
FastAppend_append(FastAppend *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t deque_id;
    int64_t timestamp, now_ms, version;
    Piece piece;
    Hit hit;

    if (append_args(self, "append", args, nargs, 5, &deque_id, &timestamp,
                    &now_ms, &version) < 0)
    {
        return NULL;
    }
    if (!PyBytes_Check(args[2])) {
        bad_argument("append", "tail", "bytes", args[2]);
        return NULL;
    }
    piece.ptr = PyBytes_AS_STRING(args[2]);
    piece.len = PyBytes_GET_SIZE(args[2]);
    return hit_tuple(fast_append(self, deque_id, version, timestamp, now_ms,
                                 &piece, 1, 0, &hit), &hit);
}

PyDoc_STRVAR(FastAppend_note_new_batch__doc__,
"note_new_batch($self, now_ms, /)\n"
"--\n"
"\n"
"A batch the Python path opened: count it for the Sender as the C append\n"
"counts its own (atomically, then a full fence), and return whether the\n"
"Sender must be woken (it would otherwise sleep past linger.ms).");

static PyObject *
FastAppend_note_new_batch(FastAppend *self, PyObject *const *args,
                          Py_ssize_t nargs)
{
    int64_t now_ms;

    if (check_nargs("note_new_batch", nargs, 1) < 0
        || check_open(self, "note_new_batch") < 0
        || int64_arg("note_new_batch", "now_ms", args[0], &now_ms) < 0)
    {
        return NULL;
    }
    return PyBool_FromLong(sender_needs_wake(self, now_ms));
}

PyDoc_STRVAR(FastAppend_append_kv__doc__,
"append_kv($self, deque_id, timestamp_ms, key, value, now_ms, version, /)\n"
"--\n"
"\n"
"Append a record without headers (key and value: bytes or None). Same\n"
"result as append().");

static PyObject *
FastAppend_append_kv(FastAppend *self, PyObject *const *args,
                     Py_ssize_t nargs)
{
    Py_ssize_t deque_id;
    int64_t timestamp, now_ms, version;
    Hit hit;

    if (append_args(self, "append_kv", args, nargs, 6, &deque_id,
                    &timestamp, &now_ms, &version) < 0)
    {
        return NULL;
    }
    if (args[2] != Py_None && !PyBytes_Check(args[2])) {
        bad_argument("append_kv", "key", "bytes or None", args[2]);
        return NULL;
    }
    if (args[3] != Py_None && !PyBytes_Check(args[3])) {
        bad_argument("append_kv", "value", "bytes or None", args[3]);
        return NULL;
    }
    return hit_tuple(append_kv(self, deque_id, version, timestamp, now_ms,
                               args[2], args[3], 0, &hit), &hit);
}

/* Kafka's murmur2 (the Java client's Utils.murmur2: seed 0x9747b28c, 4-byte
 * little-endian words, the tail folded in from its last byte down), as
 * protocol/hashing.py computes it. */
static uint32_t
murmur2(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t words = length / 4;

    for (Py_ssize_t i = 0; i < words; i++) {
        uint32_t k = rd32((const char *)data + 4 * i);

        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + 4 * words;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static int64_t
clock_ms(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

PyDoc_STRVAR(FastAppend_send_kv__doc__,
"send_kv($self, route, partition, key, value, /)\n"
"--\n"
"\n"
"The whole of Client.send for a record without headers or\n"
"explicit timestamp. route = (directory_version, deque_ids) as the caller\n"
"last read the directory; partition -1 = murmur2(key) % partitions (key\n"
"required).\n"
"\n"
"Returns ((batch_id << 32) | generation, flags (1: batch full, 2: new\n"
"batch, 4: wake the Sender), partition, offset_delta, timestamp, key_size,\n"
"value_size): futures.py's RecordFacts; an int: that partition needs a new\n"
"batch (nothing was written); None: the directory moved, the stripe is\n"
"busy, or the input needs the Python path.");

/* The whole of a headerless record's send: see send_kv's doc. Returns
 * APPENDED (out filled), NEEDS_NEW_BATCH (out->partition needs one), BUSY
 * (out->partition's stripe is taken), SEND_SLOW (the directory moved, or input
 * the Python path takes), or -1 with an exception set. */
static int
fastappend_send_kv(PyObject *fast, PyObject *route, Py_ssize_t partition,
                   PyObject *key, PyObject *value, PyObject *headers,
                   Py_ssize_t header_budget, SendResult *out)
{
    FastAppend *self = (FastAppend *)fast;

    if (check_open(self, "send_kv") < 0) {
        return -1;
    }
    if (!PyTuple_CheckExact(route) || PyTuple_GET_SIZE(route) != 2) {
        PyErr_SetString(PyExc_TypeError,
                        "send_kv() argument 'route' must be "
                        "(version, deque_ids)");
        return -1;
    }
    uint64_t version = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(route, 0));
    if (version == (uint64_t)-1 && PyErr_Occurred()) {
        return -1;
    }
    PyObject *deques = PyTuple_GET_ITEM(route, 1);
    if (!PyTuple_CheckExact(deques) || PyTuple_GET_SIZE(deques) == 0) {
        PyErr_SetString(PyExc_TypeError,
                        "send_kv() argument 'route': deque_ids must be a "
                        "non-empty tuple");
        return -1;
    }
    const char *buf = (const char *)self->view.buf;
    if (rd64(buf + self->directory_version_at) != version) {
        return SEND_SLOW;
    }
    if ((key != Py_None && !PyBytes_CheckExact(key))
        || (value != Py_None && !PyBytes_CheckExact(value)))
    {
        return SEND_SLOW;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(deques);
    if (partition < 0) {
        if (key == Py_None) {
            return SEND_SLOW;
        }
        uint32_t h = murmur2((const unsigned char *)PyBytes_AS_STRING(key),
                             PyBytes_GET_SIZE(key));
        partition = (Py_ssize_t)((h & 0x7fffffffu) % (uint32_t)count);
    }
    else if (partition >= count) {
        return SEND_SLOW;
    }
    Py_ssize_t deque_id = PyLong_AsSsize_t(PyTuple_GET_ITEM(deques,
                                                            partition));
    if (deque_id == -1 && PyErr_Occurred()) {
        return -1;
    }
    out->partition = partition;
    out->timestamp = clock_ms(CLOCK_REALTIME);
    int64_t now_ms = clock_ms(CLOCK_MONOTONIC);  /* = time.monotonic() */
    out->header_size = -1;
    int appended = headers == NULL || headers == Py_None
                   ? append_kv(self, deque_id, (int64_t)version,
                               out->timestamp, now_ms, key, value, 1,
                               &out->hit)
                   : append_kvh(self, deque_id, (int64_t)version,
                                out->timestamp, now_ms, key, value, headers,
                                header_budget, 1, &out->hit,
                                &out->header_size);
    return appended == DIR_MOVED ? SEND_SLOW : appended;
}

static Py_ssize_t
fastappend_sticky(PyObject *fast, PyObject *route)
{
    FastAppend *self = (FastAppend *)fast;

    if (!self->has_view || !PyTuple_CheckExact(route)
        || PyTuple_GET_SIZE(route) != 2)
    {
        return -1;
    }
    PyObject *deques = PyTuple_GET_ITEM(route, 1);
    if (!PyTuple_CheckExact(deques) || PyTuple_GET_SIZE(deques) == 0) {
        return -1;
    }
    Py_ssize_t deque_id = PyLong_AsSsize_t(PyTuple_GET_ITEM(deques, 0));
    if (deque_id < 0) {
        PyErr_Clear();
        return -1;
    }
    const char *deque = ((const char *)self->view.buf + self->deques_at
                         + deque_id * self->deque_size);
    uint32_t sticky = rd32(deque + self->d_sticky);
    if (sticky == 0 || (Py_ssize_t)sticky > PyTuple_GET_SIZE(deques)) {
        return -1;
    }
    return (Py_ssize_t)sticky - 1;
}

static PyObject *
FastAppend_send_kv(FastAppend *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t partition;
    SendResult sent;

    if (check_nargs("send_kv", nargs, 4) < 0
        || ssize_arg("send_kv", "partition", args[1], &partition) < 0)
    {
        return NULL;
    }
    PyObject *key = args[2], *value = args[3];
    int status = fastappend_send_kv((PyObject *)self, args[0], partition, key,
                                    value, NULL, 0, &sent);
    if (status < 0) {
        return NULL;
    }
    if (status == NEEDS_NEW_BATCH) {
        return PyLong_FromSsize_t(sent.partition);
    }
    if (status != APPENDED) {
        Py_RETURN_NONE;  /* (BUSY, SEND_SLOW: the Python path) */
    }
    Hit *hit = &sent.hit;
    PyObject *items[7];
    items[0] = PyLong_FromUnsignedLongLong(
        ((unsigned long long)hit->batch_id << 32) | hit->generation);
    items[1] = PyLong_FromLong(
        hit->full | (hit->new_batch << 1) | (hit->wake << 2));
    items[2] = PyLong_FromSsize_t(sent.partition);
    items[3] = PyLong_FromUnsignedLong(hit->offset_delta);
    items[4] = PyLong_FromLongLong(sent.timestamp);
    items[5] = PyLong_FromSsize_t(key == Py_None ? -1 : PyBytes_GET_SIZE(key));
    items[6] = PyLong_FromSsize_t(value == Py_None ? -1
                                                   : PyBytes_GET_SIZE(value));
    return tuple_of(&PyTuple_Type, items, Py_ARRAY_LENGTH(items));
}

PyDoc_STRVAR(FastAppend_drain_first__doc__,
"drain_first(deque_id, room)\n--\n\n"
"The Sender's drain of the deque's first batch (RecordAccumulator.drain's\n"
"C twin, _append_drain.c): (batch id, size, tail first slab, tail slab\n"
"count) once sealed, popped and trimmed, the tail for the caller to free;\n"
"else an int: 0 empty, 1 a damaged batch popped, 2 larger than room\n"
"(room < 0: no limit), 3 the stripe is busy, 4 the batch names another\n"
"deque (Python's cases).");

PyDoc_STRVAR(FastAppend_queued_heads__doc__,
"queued_heads(deques_used)\n--\n\n"
"The Sender's read of the deques every round, without locks\n"
"(PartitionStates._queued_heads's C twin, _append_drain.c): (heads,\n"
"empties). heads: for each active deque below deques_used with a first\n"
"batch, (deque id, first batch id, queued (1, or 2 for more), slab count,\n"
"attempts, write position, record count, created ms, last append ms);\n"
"empties: the active deques found empty.");

PyDoc_STRVAR(FastAppend_post_result__doc__,
"post_result(appenders, entry)\n--\n\n"
"The Sender's posting of one batch's result (CompletionRings.post_to's C\n"
"twin, _append_post.c): entry, packed by rings.ring_entry, into the ring\n"
"of every slot in the appender set (the descriptor's bytes) below the\n"
"slots' high mark, lowest first; (slots posted to, slots whose ring was\n"
"full). The caller wakes the slots posted to.");

PyDoc_STRVAR(FastAppend_take_results__doc__,
"take_results(slot, completion_type, view_type)\n--\n\n"
"A process's reading of its own completion ring (CompletionRings.poll's C\n"
"twin, _append_post.c): every posted result, oldest first, as\n"
"completion_type (rings.Completion) with its view_type (rings.SenderView)\n"
"or None, and the ring's head moved past them; None, with nothing read, if\n"
"the ring's indexes are damaged (poll skips them, and logs them).");

PyDoc_STRVAR(FastAppend_seal_request__doc__,
"seal_request(flexible, head, topics, codec, level, crc32c)\n--\n\n"
"The Sender's sealing of one node's drained batches into a produce\n"
"request's body (sealing.seal_request's C twin, _append_seal.c): each\n"
"row of topics [(prefix, [(batch id, partition, producer id, epoch, base\n"
"sequence, attributes)])] stored, given its header and CRC (codec 0: in\n"
"place; 3: lz4, load_lz4 first) and marked IN_FLIGHT; (the body's pieces,\n"
"each batch's size).");

PyDoc_STRVAR(FastAppend_finish_sent__doc__,
"finish_sent(rows, node, sent_ms, took_ms, deques_used)\n--\n\n"
"The Sender's finish of a response's acknowledged batches (finishing.\n"
"finish_sent's C twin, _append_finish.c): each row (batch id, generation,\n"
"base offset, log append time, log start offset) posted and FREE; (slots\n"
"posted to, [(row index, full slots)] not freed, row indexes left to the\n"
"caller, slab runs (first, count) to free).");

PyDoc_STRVAR(FastAppend_lz4_frame__doc__,
"lz4_frame(data, level)\n--\n\n"
"data as the lz4 frame seal_request makes (compression._lz4_frame's).");

PyDoc_STRVAR(FastAppend_offsets__doc__,
"offsets($self, /)\n"
"--\n"
"\n"
"The memory map given at initialisation, {key: value}: the keys of\n"
"fastpath.fast_path_offsets that this code reads.");

PyDoc_STRVAR(FastAppend_close__doc__,
"close($self, /)\n"
"--\n"
"\n"
"Release the buffer and the semaphores (the object is closed after).");

static PyObject *
FastAppend_close(FastAppend *self, PyObject *Py_UNUSED(ignored))
{
    FastAppend_release(self);
    Py_RETURN_NONE;
}

static PyMethodDef FastAppend_methods[] = {
    {"append", (PyCFunction)(void (*)(void))FastAppend_append,
     METH_FASTCALL, FastAppend_append__doc__},
    {"append_kv", (PyCFunction)(void (*)(void))FastAppend_append_kv,
     METH_FASTCALL, FastAppend_append_kv__doc__},
    {"note_new_batch", (PyCFunction)(void (*)(void))FastAppend_note_new_batch,
     METH_FASTCALL, FastAppend_note_new_batch__doc__},
    {"send_kv", (PyCFunction)(void (*)(void))FastAppend_send_kv,
     METH_FASTCALL, FastAppend_send_kv__doc__},
    {"drain_first", (PyCFunction)(void (*)(void))FastAppend_drain_first,
     METH_FASTCALL, FastAppend_drain_first__doc__},
    {"queued_heads", (PyCFunction)(void (*)(void))FastAppend_queued_heads,
     METH_FASTCALL, FastAppend_queued_heads__doc__},
    {"post_result", (PyCFunction)(void (*)(void))FastAppend_post_result,
     METH_FASTCALL, FastAppend_post_result__doc__},
    {"take_results", (PyCFunction)(void (*)(void))FastAppend_take_results,
     METH_FASTCALL, FastAppend_take_results__doc__},
    {"seal_request", (PyCFunction)(void (*)(void))FastAppend_seal_request,
     METH_FASTCALL, FastAppend_seal_request__doc__},
    {"finish_sent", (PyCFunction)(void (*)(void))FastAppend_finish_sent,
     METH_FASTCALL, FastAppend_finish_sent__doc__},
    {"lz4_frame", (PyCFunction)(void (*)(void))FastAppend_lz4_frame,
     METH_FASTCALL, FastAppend_lz4_frame__doc__},
    {"offsets", (PyCFunction)FastAppend_offsets, METH_NOARGS,
     FastAppend_offsets__doc__},
    {"close", (PyCFunction)FastAppend_close, METH_NOARGS,
     FastAppend_close__doc__},
    {NULL, NULL, 0, NULL}
};

PyDoc_STRVAR(FastAppend__doc__,
"FastAppend(buffer, semaphores, layout, pool_lock, lockdep=None)\n"
"--\n"
"\n"
"The append fast path over a pool segment (see accumulator.py): buffer is\n"
"the segment, semaphores the stripe locks' names, layout\n"
"fastpath.fast_path_offsets plus slot, pid, started and record_batch_header,\n"
"pool_lock the pool lock's name, lockdep shm/lockdep.py's PoolLockHook\n"
"(told of every lock taken and dropped) or None.");

static PyTypeObject FastAppendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmkafka.pool._append.FastAppend",
    .tp_basicsize = sizeof(FastAppend),
    .tp_dealloc = (destructor)FastAppend_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = FastAppend__doc__,
    .tp_methods = FastAppend_methods,
    .tp_init = (initproc)FastAppend_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------
 * The module (multi-phase initialisation, PEP 489).
 */

PyDoc_STRVAR(full_fence__doc__,
"full_fence($module, /)\n"
"--\n"
"\n"
"A full memory fence (the Sender's side of the new-batch wake protocol).");

static PyObject *
full_fence(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(load_lz4__doc__,
"load_lz4($module, path, /)\n"
"--\n"
"\n"
"Whether seal_request can compress lz4: the LZ4F functions found in the\n"
"library at path (the lz4 package's, loaded already), of the frame API\n"
"version it speaks.");

static PyMethodDef module_methods[] = {
    {"full_fence", (PyCFunction)full_fence, METH_NOARGS, full_fence__doc__},
    {"load_lz4", (PyCFunction)append_load_lz4, METH_O, load_lz4__doc__},
    {NULL, NULL, 0, NULL}
};

static const AppendAPI append_api = {
    .fast_append_type = &FastAppendType,
    .send_kv = fastappend_send_kv,
    .sticky = fastappend_sticky,
};

static int
append_exec(PyObject *module)
{
    if (PyModule_AddType(module, &FastAppendType) < 0) {
        return -1;
    }
    return add_api_capsule(module, &append_api, APPEND_API_CAPSULE);
}

static PyModuleDef_Slot append_slots[] = {
    {Py_mod_exec, append_exec},
#ifdef Py_mod_multiple_interpreters
    /* FastAppend is a static type, shared by every interpreter */
    {Py_mod_multiple_interpreters,
     Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL}
};

static struct PyModuleDef append_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shmkafka.pool._append",
    .m_doc = "The accumulator's append fast path in C.",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = append_slots,
};

PyMODINIT_FUNC
PyInit__append(void)
{
    return PyModuleDef_Init(&append_module);
}
