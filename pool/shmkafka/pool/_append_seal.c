/*
 * The Sender's sealing of one node's drained batches into a produce
 * request's body, in one call a round (FastAppend.seal_request). Python
 * twin and reference: pool/sealing.py's seal_request, which the Sender
 * calls where this one cannot serve (no extension; another codec than lz4
 * with no compression threads to compress ahead; an lz4 library that did
 * not load).
 *
 * Part of the _append extension (_append_internal.h).
 *
 * For each batch, in this order (sealing.py's rules):
 *   1. its producer id, epoch and base sequence to its descriptor (shared
 *      memory first: a Sender killed after this resends it with them);
 *   2. its RecordBatch header and CRC-32C: in place before its records, or
 *      (lz4) in a new buffer before the records compressed as one lz4 frame,
 *      or (a row with its parts: compressed already, by the Sender's
 *      compression threads) in a new header before those parts;
 *   3. its state IN_FLIGHT;
 * and the body framed as protocol/messages/produce.py's _encode_request
 * frames it: the caller's head and each topic's prefix (name, partition
 * count), then per partition its index, its records' size and its records.
 *
 * lz4: the frame is the lz4.frame package's, made by its own library
 * (_append_lz4.c). The CRC is the crc32c package's function, given by the
 * caller.
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"

/* ------------------------------------------------------------------------
 * The body's framing: big-endian fields and the flexible versions' varints.
 */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Frame;

/* A struct's empty tagged-field section, in the flexible versions. */
static const char NO_TAGS = 0;

static int
frame_room(Frame *f, Py_ssize_t more)
{
    if (f->len + more <= f->cap) {
        return 0;
    }
    Py_ssize_t cap = (f->cap + more) * 2;
    char *data = PyMem_Realloc(f->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    f->data = data;
    f->cap = cap;
    return 0;
}

static int
frame_put(Frame *f, const void *src, Py_ssize_t n)
{
    if (frame_room(f, n) < 0) {
        return -1;
    }
    memcpy(f->data + f->len, src, (size_t)n);
    f->len += n;
    return 0;
}

static void
put_be(char *at, uint64_t v, int size)
{
    for (int i = size - 1; i >= 0; i--) {
        at[i] = (char)(v & 0xFF);
        v >>= 8;
    }
}

static int
frame_be(Frame *f, uint64_t v, int size)
{
    char bytes[8];

    put_be(bytes, v, size);
    return frame_put(f, bytes, size);
}

static int
frame_uvarint(Frame *f, uint64_t v)
{
    char bytes[10];
    int n = 0;

    while (v >= 0x80) {
        bytes[n++] = (char)(v | 0x80);
        v >>= 7;
    }
    bytes[n++] = (char)v;
    return frame_put(f, bytes, n);
}

/* The framing so far as a bytes piece of `pieces`, then empty. */
static int
frame_flush(Frame *f, PyObject *pieces)
{
    if (f->len == 0) {
        return 0;
    }
    PyObject *piece = PyBytes_FromStringAndSize(f->data, f->len);
    f->len = 0;
    return append_new(pieces, piece);
}

/* ------------------------------------------------------------------------
 * One batch.
 */

enum { RECORD_BATCH_HEADER = 61, CRC_AT = 17, ATTRIBUTES_AT = 21,
       COMPRESSION_MASK = 0x07, CODEC_NONE = 0, CODEC_LZ4 = 3 };

typedef struct {
    int64_t batch_id, partition, producer_id, epoch, sequence, attributes;
} Row;

static int
row_field(PyObject *row, Py_ssize_t i, const char *name, int64_t lo,
          int64_t hi, int64_t *out)
{
    PyObject *item = PyTuple_GET_ITEM(row, i);
    if (int64_arg("seal_request", name, item, out) < 0) {
        return -1;
    }
    if (*out < lo || *out > hi) {
        PyErr_Format(PyExc_ValueError,
                     "seal_request(): %s %lld is out of range",
                     name, (long long)*out);
        return -1;
    }
    return 0;
}

static int
parse_row(FastAppend *self, PyObject *row, Row *r)
{
    if (!PyTuple_Check(row)
        || (PyTuple_GET_SIZE(row) != 6 && PyTuple_GET_SIZE(row) != 7))
    {
        bad_argument("seal_request", "row", "a tuple of 6 ints (and parts)",
                     row);
        return -1;
    }
    return (row_field(row, 0, "batch id", 0, self->num_slabs - 1,
                      &r->batch_id) < 0
            || row_field(row, 1, "partition", INT32_MIN, INT32_MAX,
                         &r->partition) < 0
            || row_field(row, 2, "producer id", INT64_MIN, INT64_MAX,
                         &r->producer_id) < 0
            || row_field(row, 3, "producer epoch", INT16_MIN, INT16_MAX,
                         &r->epoch) < 0
            || row_field(row, 4, "base sequence", INT32_MIN, INT32_MAX,
                         &r->sequence) < 0
            || row_field(row, 5, "attributes", INT16_MIN, INT16_MAX,
                         &r->attributes) < 0) ? -1 : 0;
}

/* The batch's descriptor fields the header needs, its records' bytes in the
 * segment, checked as sealing.py's _records checks them. */
typedef struct {
    char *data;                 /* header reserve, then records */
    Py_ssize_t write_pos;
    uint32_t record_count;
    int64_t base_ts, max_ts;
} Records;

static int
read_records(FastAppend *self, const Row *r, Records *out)
{
    char *batch = batch_at(self, (uint32_t)r->batch_id);
    Py_ssize_t first = rd32(batch + self->b_first_slab);
    Py_ssize_t count = rd32(batch + self->b_slab_count);

    out->write_pos = rd32(batch + self->b_write_pos);
    out->record_count = rd32(batch + self->b_record_count);
    out->base_ts = (int64_t)rd64(batch + self->b_base_ts);
    out->max_ts = (int64_t)rd64(batch + self->b_max_ts);
    if (first + count > self->num_slabs
        || out->write_pos <= RECORD_BATCH_HEADER
        || out->write_pos > count * self->slab_size
        || out->write_pos > INT32_MAX || out->record_count < 1
        || out->record_count > (uint64_t)(out->write_pos - RECORD_BATCH_HEADER))
    {
        PyErr_Format(PyExc_ValueError,
                     "batch %lld: its descriptor does not hold a batch",
                     (long long)r->batch_id);
        return -1;
    }
    out->data = ((char *)self->view.buf + self->slabs_at
                 + first * self->slab_size);
    return 0;
}

/* The producer's fields to the descriptor (BatchTable.set_producer_state). */
static void
store_producer(FastAppend *self, const Row *r)
{
    char *batch = batch_at(self, (uint32_t)r->batch_id);
    uint16_t epoch = (uint16_t)r->epoch;

    store_release64(batch + self->b_producer_id, (uint64_t)r->producer_id);
    memcpy(batch + self->b_producer_epoch, &epoch, sizeof(epoch));
    store_release32(batch + self->b_base_sequence, (uint32_t)r->sequence);
}

/* The 61-byte header at `at` (records.finalize_batch's), CRC still 0, for a
 * batch of `end` bytes. */
static void
put_header(char *at, const Row *r, const Records *rec, Py_ssize_t end,
           int codec)
{
    put_be(at, 0, 8);                                   /* base offset */
    put_be(at + 8, (uint64_t)(end - 12), 4);
    put_be(at + 12, (uint64_t)(int64_t)-1, 4);          /* leader epoch */
    at[16] = 2;                                         /* magic */
    put_be(at + CRC_AT, 0, 4);
    put_be(at + ATTRIBUTES_AT,
           (uint64_t)((r->attributes & ~COMPRESSION_MASK) | codec), 2);
    put_be(at + 23, rec->record_count - 1, 4);          /* last delta */
    put_be(at + 27, (uint64_t)rec->base_ts, 8);
    put_be(at + 35, (uint64_t)rec->max_ts, 8);
    put_be(at + 43, (uint64_t)r->producer_id, 8);
    put_be(at + 51, (uint64_t)r->epoch, 2);
    put_be(at + 53, (uint64_t)r->sequence, 4);
    put_be(at + 57, rec->record_count, 4);
}

/* The CRC-32C of at[21:end], by the caller's function, into at[17:21]. */
static int
put_crc(char *at, Py_ssize_t end, PyObject *crc32c)
{
    PyObject *view = PyMemoryView_FromMemory(at + ATTRIBUTES_AT,
                                             end - ATTRIBUTES_AT, PyBUF_READ);
    if (view == NULL) {
        return -1;
    }
    PyObject *crc = PyObject_CallOneArg(crc32c, view);
    Py_DECREF(view);
    if (crc == NULL) {
        return -1;
    }
    unsigned long value = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    put_be(at + CRC_AT, (uint32_t)value, 4);
    return 0;
}

/* The batch sealed as it lies (no compression): its header in place; a
 * view of the segment, which it keeps mapped while the view lives. */
static PyObject *
seal_in_place(FastAppend *self, const Row *r, const Records *rec,
              PyObject *crc32c)
{
    put_header(rec->data, r, rec, rec->write_pos, CODEC_NONE);
    if (put_crc(rec->data, rec->write_pos, crc32c) < 0) {
        return NULL;
    }
    PyObject *segment = PyMemoryView_FromObject(self->view.obj);
    if (segment == NULL) {
        return NULL;
    }
    Py_ssize_t start = rec->data - (char *)self->view.buf;
    PyObject *piece = PySequence_GetSlice(segment, start,
                                          start + rec->write_pos);
    Py_DECREF(segment);
    return piece == NULL ? NULL : Py_BuildValue("(N)", piece);
}

/* The batch sealed around its records compressed: new bytes. */
static PyObject *
seal_compressed(FastAppend *self, const Row *r, const Records *rec,
                int level, PyObject *crc32c)
{
    size_t size = (size_t)(rec->write_pos - RECORD_BATCH_HEADER);
    PyObject *out = PyBytes_FromStringAndSize(
        NULL, RECORD_BATCH_HEADER + (Py_ssize_t)lz4_frame_bound(size, level));
    if (out == NULL) {
        return NULL;
    }
    char *at = PyBytes_AS_STRING(out);
    Py_ssize_t n = lz4_frame_into(self, at + RECORD_BATCH_HEADER,
                                  rec->data + RECORD_BATCH_HEADER, size,
                                  level);
    if (n < 0 || _PyBytes_Resize(&out, RECORD_BATCH_HEADER + n) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    at = PyBytes_AS_STRING(out);
    put_header(at, r, rec, RECORD_BATCH_HEADER + n, CODEC_LZ4);
    if (put_crc(at, RECORD_BATCH_HEADER + n, crc32c) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return Py_BuildValue("(N)", out);
}

/* The batch sealed around its records compressed already (`parts`, by the
 * Sender's compression threads): a new header, then the parts as they are;
 * the CRC over the header's tail and each part in turn. */
static PyObject *
seal_parts(const Row *r, const Records *rec, int codec, PyObject *parts,
           PyObject *crc32c)
{
    if (!PyTuple_Check(parts)) {
        bad_argument("seal_request", "parts", "tuple", parts);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(parts), size = RECORD_BATCH_HEADER;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = PyObject_Length(PyTuple_GET_ITEM(parts, i));
        if (len < 0) {
            return NULL;
        }
        size += len;
    }
    if (size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "seal_request(): parts too large");
        return NULL;
    }
    PyObject *out = PyTuple_New(n + 1);
    PyObject *header = PyBytes_FromStringAndSize(NULL, RECORD_BATCH_HEADER);
    if (out == NULL || header == NULL) {
        Py_XDECREF(out);
        Py_XDECREF(header);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, header);
    char *at = PyBytes_AS_STRING(header);
    put_header(at, r, rec, size, codec);
    PyObject *crc = PyLong_FromUnsignedLong(0);
    PyObject *tail = PyMemoryView_FromMemory(at + ATTRIBUTES_AT,
                                             RECORD_BATCH_HEADER - ATTRIBUTES_AT,
                                             PyBUF_READ);
    for (Py_ssize_t i = -1; crc != NULL && tail != NULL && i < n; i++) {
        PyObject *part = i < 0 ? tail : PyTuple_GET_ITEM(parts, i);
        PyObject *next = PyObject_CallFunctionObjArgs(crc32c, part, crc, NULL);
        Py_SETREF(crc, next);
        if (i >= 0) {
            PyTuple_SET_ITEM(out, i + 1, Py_NewRef(part));
        }
    }
    Py_XDECREF(tail);
    unsigned long value = crc == NULL ? 0 : PyLong_AsUnsignedLong(crc);
    Py_XDECREF(crc);
    if (crc == NULL || PyErr_Occurred()) {
        Py_DECREF(out);
        return NULL;
    }
    put_be(at + CRC_AT, (uint32_t)value, 4);
    return out;
}

typedef struct {
    int flexible, codec, level;
    PyObject *crc32c, *pieces, *sizes;
    Frame frame;
} Sealing;

/* One partition of the body: the batch sealed, marked IN_FLIGHT, framed. */
static int
seal_partition(FastAppend *self, Sealing *s, PyObject *row)
{
    Row r;
    Records rec;

    if (parse_row(self, row, &r) < 0) {
        return -1;
    }
    PyObject *parts = PyTuple_GET_SIZE(row) == 7 ? PyTuple_GET_ITEM(row, 6)
                                                 : Py_None;
    if (parts == Py_None && s->codec != CODEC_NONE
        && (s->codec != CODEC_LZ4 || !lz4_ready()))
    {
        PyErr_Format(PyExc_ValueError, "seal_request(): codec %d is not "
                     "compressed in C: give each row its parts", s->codec);
        return -1;
    }
    if (read_records(self, &r, &rec) < 0) {
        return -1;
    }
    store_producer(self, &r);
    PyObject *batch = (
        parts != Py_None ? seal_parts(&r, &rec, s->codec, parts, s->crc32c)
        : s->codec == CODEC_LZ4 ? seal_compressed(self, &r, &rec, s->level,
                                                  s->crc32c)
        : seal_in_place(self, &r, &rec, s->crc32c));
    if (batch == NULL) {
        return -1;
    }
    store_release32(batch_at(self, (uint32_t)r.batch_id) + self->b_state,
                    (uint32_t)self->in_flight_state);
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(batch); i++) {
        size += PyObject_Length(PyTuple_GET_ITEM(batch, i));
    }
    int failed = (
        frame_be(&s->frame, (uint64_t)r.partition, 4) < 0
        || (s->flexible ? frame_uvarint(&s->frame, (uint64_t)size + 1)
                        : frame_be(&s->frame, (uint64_t)size, 4)) < 0
        || frame_flush(&s->frame, s->pieces) < 0
        || append_new(s->sizes, PyLong_FromSsize_t(size)) < 0);
    for (Py_ssize_t i = 0; !failed && i < PyTuple_GET_SIZE(batch); i++) {
        failed = PyList_Append(s->pieces, PyTuple_GET_ITEM(batch, i)) < 0;
    }
    Py_DECREF(batch);
    if (failed) {
        return -1;
    }
    return s->flexible ? frame_put(&s->frame, &NO_TAGS, 1) : 0;
}

static int
seal_topic(FastAppend *self, Sealing *s, PyObject *topic)
{
    if (!PyTuple_Check(topic) || PyTuple_GET_SIZE(topic) != 2
        || !PyBytes_Check(PyTuple_GET_ITEM(topic, 0))
        || !PyList_Check(PyTuple_GET_ITEM(topic, 1)))
    {
        bad_argument("seal_request", "topic", "a (bytes, list) tuple", topic);
        return -1;
    }
    PyObject *prefix = PyTuple_GET_ITEM(topic, 0);
    PyObject *rows = PyTuple_GET_ITEM(topic, 1);
    if (frame_put(&s->frame, PyBytes_AS_STRING(prefix),
                  PyBytes_GET_SIZE(prefix)) < 0)
    {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        if (seal_partition(self, s, PyList_GET_ITEM(rows, i)) < 0) {
            return -1;
        }
    }
    return s->flexible ? frame_put(&s->frame, &NO_TAGS, 1) : 0;
}

/* FastAppend.seal_request(flexible, head, topics, codec, level, crc32c):
 * see _append.pyi. */
PyObject *
FastAppend_seal_request(FastAppend *self, PyObject *const *args,
                        Py_ssize_t nargs)
{
    static const char fname[] = "seal_request";
    Py_ssize_t codec, level;

    if (check_open(self, fname) < 0 || check_nargs(fname, nargs, 6) < 0
        || ssize_arg(fname, "codec", args[3], &codec) < 0
        || ssize_arg(fname, "level", args[4], &level) < 0)
    {
        return NULL;
    }
    if (!PyBytes_Check(args[1]) || !PyList_Check(args[2])) {
        bad_argument(fname, PyBytes_Check(args[1]) ? "topics" : "head",
                     PyBytes_Check(args[1]) ? "list" : "bytes",
                     PyBytes_Check(args[1]) ? args[2] : args[1]);
        return NULL;
    }
    if (codec < 0 || codec > COMPRESSION_MASK) {
        PyErr_Format(PyExc_ValueError, "seal_request(): no codec %zd", codec);
        return NULL;
    }
    Sealing s = {
        .flexible = PyObject_IsTrue(args[0]), .codec = (int)codec,
        .level = (int)level, .crc32c = args[5],
        .pieces = PyList_New(0), .sizes = PyList_New(0),
    };
    PyObject *topics = args[2];
    int failed = (
        s.flexible < 0 || s.pieces == NULL || s.sizes == NULL
        || frame_put(&s.frame, PyBytes_AS_STRING(args[1]),
                     PyBytes_GET_SIZE(args[1])) < 0);
    for (Py_ssize_t i = 0; !failed && i < PyList_GET_SIZE(topics); i++) {
        failed = seal_topic(self, &s, PyList_GET_ITEM(topics, i)) < 0;
    }
    if (!failed && s.flexible) {
        failed = frame_put(&s.frame, &NO_TAGS, 1) < 0;
    }
    failed = failed || frame_flush(&s.frame, s.pieces) < 0;
    PyMem_Free(s.frame.data);
    if (failed) {
        Py_XDECREF(s.pieces);
        Py_XDECREF(s.sizes);
        return NULL;
    }
    return Py_BuildValue("(NN)", s.pieces, s.sizes);
}
