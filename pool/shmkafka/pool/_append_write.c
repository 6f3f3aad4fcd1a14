/*
 * The append itself, as RecordAccumulator._try_append and _append_new_batch
 * do it (pool/accumulator.py, the reference): the stripe lock taken as
 * LockSet.acquire takes it (_append_locks.c), the record framed into the last OPEN batch of its
 * deque or into a batch opened on a run of free slabs, published, unlocked;
 * and a record's key, value and headers as its pieces, as records.py encodes
 * them. Part of the _append extension (_append_internal.h).
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"

/* ------------------------------------------------------------------------
 * The fast path.
 */

/* A record's bytes before its tail: length, attributes, timestamp delta,
 * offset delta (its twin: protocol/records.py's record_head). */
static int
record_head(unsigned char *out, int64_t timestamp_delta,
            uint32_t offset_delta, Py_ssize_t tail_len)
{
    unsigned char deltas[21];
    int d = put_varlong(deltas, timestamp_delta);

    d += put_varlong(deltas + d, (int64_t)offset_delta);
    int n = put_varlong(out, 1 + d + tail_len);
    out[n++] = 0;  /* attributes */
    memcpy(out + n, deltas, (size_t)d);
    return n + d;
}

static void
copy_record(char *dst, const unsigned char *head, int n,
            const Piece *pieces, int n_pieces)
{
    memcpy(dst, head, (size_t)n);
    dst += n;
    for (int i = 0; i < n_pieces; i++) {
        memcpy(dst, pieces[i].ptr, (size_t)pieces[i].len);
        dst += pieces[i].len;
    }
}

/* Append to the last batch of the deque if it is OPEN and has room (stripe
 * lock held). When it is OPEN but too full, *grow_to is how many slabs the
 * next batch asks for. */
static int
append_to_last(FastAppend *self, char *deque, int64_t timestamp,
               int64_t now_ms, const Piece *pieces, int n_pieces,
               Py_ssize_t tail_len, Hit *hit, Py_ssize_t *grow_to)
{
    char *buf = (char *)self->view.buf;
    uint64_t ends = rd64(deque + self->d_ends);
    uint32_t first = (uint32_t)ends;
    uint32_t batch_id = (uint32_t)(ends >> 32);

    if (first >= (uint32_t)self->num_slabs
        || batch_id >= (uint32_t)self->num_slabs)
    {
        /* empty, or damaged ends (the Sender quarantines the deque) */
        return NEEDS_NEW_BATCH;
    }
    char *batch = batch_at(self, batch_id);
    if (rd32(batch + self->b_state) != (uint32_t)self->open_state) {
        return NEEDS_NEW_BATCH;
    }
    uint32_t first_slab = rd32(batch + self->b_first_slab);
    uint32_t slab_count = rd32(batch + self->b_slab_count);
    uint32_t write_pos = rd32(batch + self->b_write_pos);
    uint32_t count = rd32(batch + self->b_record_count);
    if (self->batch_max_records > 0
        && count >= (uint32_t)self->batch_max_records)
    {
        return NEEDS_NEW_BATCH;  /* full by count: the next run as long */
    }
    int64_t max_ts = (int64_t)rd64(batch + self->b_max_ts);
    int64_t base_ts = (int64_t)rd64(batch + self->b_base_ts);
    unsigned char head_bytes[32];
    int n = record_head(head_bytes, timestamp - base_ts, count, tail_len);
    int64_t end = (int64_t)write_pos + n + tail_len;
    int64_t capacity = (int64_t)slab_count * self->slab_size;
    if (end > capacity) {
        /* full by bytes before the Sender took it: the next run is twice as
         * long (RecordAccumulator._run_wanted) */
        *grow_to = 2 * (Py_ssize_t)slab_count;
        return NEEDS_NEW_BATCH;
    }
    char *slab = (buf + self->slabs_at
                  + (Py_ssize_t)first_slab * self->slab_size);
    copy_record(slab + write_pos, head_bytes, n, pieces, n_pieces);
    char *bits = (buf + self->appenders_at
                  + (Py_ssize_t)batch_id * self->appenders_size
                  + (self->slot >> 3));
    unsigned char bit = (unsigned char)(1u << (self->slot & 7));
    if (!(*bits & bit)) {
        *bits |= bit;
    }
    /* Publish last: the times, then write_pos | count << 32 in one aligned
     * 8-byte store (layout.py), so a process killed at any instruction
     * leaves no partial record. */
    uint32_t new_count = count + 1;
    int64_t new_max = timestamp > max_ts ? timestamp : max_ts;
    wr64(batch + self->b_max_ts, (uint64_t)new_max);
    wr64(batch + self->b_last_append, (uint64_t)now_ms);
    store_release64(batch + self->b_publish,
                    (uint64_t)(uint32_t)end | (uint64_t)new_count << 32);
    hit->batch_id = batch_id;
    hit->generation = rd32(batch + self->b_generation);
    hit->offset_delta = count;
    hit->full = (capacity - end) < (n + tail_len)
                || (self->batch_max_records > 0
                    && new_count >= (uint32_t)self->batch_max_records);
    hit->queued = first == batch_id ? 1 : 2;  /* (only "more than one" is used) */
    hit->new_batch = 0;
    hit->wake = hit->full;
    return APPENDED;
}

/* The first free run of `want` slabs in the free map from slab `from` on
 * (then from 0: next fit, BufferPool._take), else the longest shorter one:
 * *length gets its length (0: none free). */
static Py_ssize_t
find_run(const char *freemap, Py_ssize_t num_slabs, Py_ssize_t want,
         Py_ssize_t from, Py_ssize_t *length)
{
    Py_ssize_t best = -1, best_len = 0;

    if (from > 0 && from < num_slabs) {
        Py_ssize_t first = find_run(freemap + from, num_slabs - from, want, 0,
                                    length);
        if (first >= 0 && *length >= want) {
            return from + first;
        }
        best = first >= 0 ? from + first : -1;
        best_len = first >= 0 ? *length : 0;
    }
    Py_ssize_t i = 0;
    while (i < num_slabs) {
        const char *free_at = memchr(freemap + i, 0, (size_t)(num_slabs - i));
        if (free_at == NULL) {
            break;
        }
        Py_ssize_t start = free_at - freemap, end = start + 1;
        while (end < num_slabs && end - start < want && freemap[end] == 0) {
            end++;
        }
        if (end - start > best_len) {
            best = start;
            best_len = end - start;
            if (best_len >= want) {
                break;
            }
        }
        i = end;
    }
    *length = best_len;
    return best;
}

/* Free slabs in the free map (BufferPool.free_slabs). */
static Py_ssize_t
free_slabs(const char *freemap, Py_ssize_t num_slabs)
{
    Py_ssize_t free = 0;
    for (Py_ssize_t i = 0; i < num_slabs; i++) {
        free += freemap[i] == 0;
    }
    return free;
}

/* Take a run of `want` free slabs (or, with memory plenty, the longest
 * shorter one that holds `need`) as BufferPool.allocate does in its common
 * case (nobody queued for memory, nothing pending in our slot), recording it
 * as pending in our slot first. Returns the first slab and sets *count, or -1
 * (Python allocates: it may wait for the run it wants, RUN_PATIENCE_S, or
 * queue), or -2 with an exception set (lockdep). */
static Py_ssize_t
take_run(FastAppend *self, Py_ssize_t want, Py_ssize_t need,
         Py_ssize_t *count)
{
    char *buf = (char *)self->view.buf;
    Py_ssize_t first = -1;

    if (rd32(buf + self->pending_first_at) != (uint32_t)self->no_slab) {
        return -1;  /* another thread of ours is allocating */
    }
    int taken = TAKE_LOCK(self, self->pool_lock, self->pool_sem, "take_run");
    if (taken <= 0) {
        return taken < 0 ? -2 : -1;
    }
    if (rd64(buf + self->waitq_head_at) == rd64(buf + self->waitq_tail_at)) {
        char *freemap = buf + self->freemap_at;
        Py_ssize_t cursor = (Py_ssize_t)rd32(buf + self->alloc_cursor_at);
        first = find_run(freemap, self->num_slabs, want, cursor, count);
        if (first >= 0 && *count < need) {
            first = -1;  /* no run holds the record: Python waits or fails */
        }
        if (first >= 0 && *count < want
            && free_slabs(freemap, self->num_slabs)
                   < need + self->num_slabs / PLENTY_FRACTION) {
            first = -1;  /* memory is short: Python holds out for `want` */
        }
        if (first >= 0) {
            wr32(buf + self->alloc_cursor_at, (uint32_t)(first + *count));
            wr32(buf + self->pending_first_at, (uint32_t)first);
            wr32(buf + self->pending_count_at, (uint32_t)*count);
            memset(freemap + first, 1, (size_t)*count);
        }
    }
    drop_lock(self, self->pool_lock, self->pool_sem);
    return first;
}

/* How many slabs a new batch of this deque asks for: `grow_to` (the last
 * batch filled while open) or the deque's run hint, within 1..max_run. */
static Py_ssize_t
run_wanted(FastAppend *self, const char *deque, Py_ssize_t grow_to)
{
    Py_ssize_t want = grow_to > 0 ? grow_to
                                  : (Py_ssize_t)rd32(deque + self->d_run_hint);
    if (want < 1) {
        want = 1;
    }
    return want > self->max_run ? self->max_run : want;
}

/* A new batch needs the Sender's attention within linger.ms. Skip the wake
 * (a semaphore post, two context switches) when the Sender will look in time
 * by itself: it is looking now (wake_at 0; it re-reads new_batches before it
 * sleeps), or it sleeps until no later than now + linger. The counter store
 * and the wake_at load are ordered by a full fence, as the Sender orders its
 * wake_at store and counter load (Dekker-style). */
int
sender_needs_wake(FastAppend *self, int64_t now_ms)
{
    char *buf = (char *)self->view.buf;

    /* atomic across processes: the counter only grows, so any change is
     * seen */
    __atomic_add_fetch((uint64_t *)(void *)(buf + self->new_batches_at), 1,
                       __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int64_t wake_at = (int64_t)rd64(buf + self->sender_wake_at);
    int64_t linger = (int64_t)rd64(buf + self->sender_linger_at);
    return wake_at != 0 && wake_at > now_ms + linger;
}

/* How many slabs a batch whose first record ends at `end` needs (0: C
 * leaves the record to Python, which rejects it if record_size_bound is
 * above the limit). The bound is at most BOUND_SLACK above the exact end,
 * so C takes only records Python's check lets through. */
static Py_ssize_t
slabs_needed(FastAppend *self, int64_t end)
{
    if (end + BOUND_SLACK > self->record_limit) {
        return 0;  /* (a limit below a slab's size too: buffer_memory) */
    }
    return (Py_ssize_t)((end + self->slab_size - 1) / self->slab_size);
}

/* Open a batch on a fresh run of slabs holding this one record (a record
 * larger than a slab gets a run that holds it, as BufferPool.allocate's
 * slabs_for) and queue it on the deque (stripe lock held), in
 * RecordAccumulator._open_batch's order: descriptor and record first, then
 * the deque push that publishes the batch, then the pending record is
 * cleared. */
static int
open_batch(FastAppend *self, char *deque, Py_ssize_t deque_id,
           int64_t timestamp, int64_t now_ms, const Piece *pieces,
           int n_pieces, Py_ssize_t tail_len, Py_ssize_t grow_to, Hit *hit)
{
    char *buf = (char *)self->view.buf;
    unsigned char head_bytes[32];
    int n = record_head(head_bytes, 0, 0, tail_len);
    int64_t end = self->record_batch_header + n + tail_len;
    Py_ssize_t need = slabs_needed(self, end);
    if (need == 0) {
        return NEEDS_NEW_BATCH;
    }
    Py_ssize_t want = run_wanted(self, deque, grow_to);
    Py_ssize_t slab_count = 0;
    Py_ssize_t slab = take_run(self, want > need ? want : need, need,
                               &slab_count);
    if (slab < 0) {
        return slab == -2 ? -1 : NEEDS_NEW_BATCH;
    }
    int64_t capacity = (int64_t)slab_count * self->slab_size;
    char *records = buf + self->slabs_at + slab * self->slab_size;
    copy_record(records + self->record_batch_header, head_bytes, n, pieces,
                n_pieces);
    char *batch = batch_at(self, (uint32_t)slab);
    uint32_t generation = rd32(batch + self->b_generation) + 1;
    int16_t no_epoch = -1;
    wr32(batch + self->b_generation, generation);
    wr32(batch + self->b_deque, (uint32_t)deque_id);
    wr32(batch + self->b_first_slab, (uint32_t)slab);
    wr32(batch + self->b_slab_count, (uint32_t)slab_count);
    wr32(batch + self->b_attempts, 0);
    wr32(batch + self->b_write_pos, (uint32_t)end);
    wr32(batch + self->b_record_count, 1);
    wr64(batch + self->b_max_ts, (uint64_t)timestamp);
    wr64(batch + self->b_last_append, (uint64_t)now_ms);
    wr64(batch + self->b_base_ts, (uint64_t)timestamp);
    wr64(batch + self->b_created, (uint64_t)now_ms);
    wr64(batch + self->b_producer_id, (uint64_t)-1);
    memcpy(batch + self->b_producer_epoch, &no_epoch, sizeof(no_epoch));
    wr32(batch + self->b_base_sequence, (uint32_t)-1);
    char *appenders = (buf + self->appenders_at
                       + slab * self->appenders_size);
    memset(appenders, 0, (size_t)self->appenders_size);
    appenders[self->slot >> 3] = (char)(1u << (self->slot & 7));
    wr32(batch + self->b_parent, (uint32_t)self->no_parent);
    wr32(batch + self->b_parent_generation, 0);
    wr32(batch + self->b_parent_delta, 0);
    /* last: the descriptor is whole */
    store_release32(batch + self->b_state, (uint32_t)self->open_state);
    /* the deque is active before the batch is in it (batches.py) */
    char *active = buf + self->active_at + deque_id;
    if (!*active) {
        *active = 1;
    }
    uint64_t ends = rd64(deque + self->d_ends);
    uint32_t first = (uint32_t)ends;
    uint32_t last = (uint32_t)(ends >> 32);
    int was_empty = first >= (uint32_t)self->num_slabs
                    || last >= (uint32_t)self->num_slabs;
    if (!was_empty) {
        wr32(batch_at(self, last) + self->b_next, (uint32_t)slab);
    }
    /* publish: the batch is queued */
    store_release64(deque + self->d_ends,
                    (uint64_t)(was_empty ? (uint32_t)slab : first)
                    | (uint64_t)(uint32_t)slab << 32);
    /* committed: the batch owns the slab */
    wr32(buf + self->pending_first_at, (uint32_t)self->no_slab);
    wr32(buf + self->pending_count_at, 0);
    hit->batch_id = (uint32_t)slab;
    hit->generation = generation;
    hit->offset_delta = 0;
    hit->full = (capacity - end) < (n + tail_len) || self->batch_max_records == 1;
    hit->queued = was_empty ? 1 : 2;
    hit->new_batch = 1;
    hit->wake = hit->full || sender_needs_wake(self, now_ms);
    return APPENDED;
}

/* The fast path proper: lock the stripe, check that the directory is still
 * at ``version`` (the one the caller resolved the deque at; -1: unchecked),
 * append one record whose part after the offset delta is the concatenation
 * of ``pieces`` (opening a batch for it when ``may_open`` and the last one
 * has no room), publish, unlock. Returns APPENDED with ``hit`` filled, or
 * BUSY (the stripe is taken) / DIR_MOVED / NEEDS_NEW_BATCH when Python must
 * take the slow path (-1 with an exception: lockdep). The version is read under the lock: a topic is retired,
 * its deques given back, only under their stripe locks and with a new
 * version (directory.py), so no record reaches a deque given back. */
int
fast_append(FastAppend *self, Py_ssize_t deque_id, int64_t version,
            int64_t timestamp, int64_t now_ms, const Piece *pieces,
            int n_pieces, int may_open, Hit *hit)
{
    Py_ssize_t tail_len = 0;

    for (int i = 0; i < n_pieces; i++) {
        tail_len += pieces[i].len;
    }
    Py_ssize_t stripe = deque_id % self->n_sems;
    Py_ssize_t lock = self->first_stripe + stripe;
    int taken = TAKE_LOCK(self, lock, self->sems[stripe], "fast_append");
    if (taken <= 0) {
        return taken < 0 ? -1 : BUSY;
    }
    if (version >= 0
        && rd64((const char *)self->view.buf + self->directory_version_at)
               != (uint64_t)version)
    {
        drop_lock(self, lock, self->sems[stripe]);
        return DIR_MOVED;
    }
    char *deque = ((char *)self->view.buf + self->deques_at
                   + deque_id * self->deque_size);
    Py_ssize_t grow_to = 0;
    int result = append_to_last(self, deque, timestamp, now_ms, pieces,
                                n_pieces, tail_len, hit, &grow_to);
    if (result == NEEDS_NEW_BATCH && may_open) {
        result = open_batch(self, deque, deque_id, timestamp, now_ms, pieces,
                            n_pieces, tail_len, grow_to, hit);
    }
    drop_lock(self, lock, self->sems[stripe]);
    return result;
}

/* ------------------------------------------------------------------------
 * A record's key, value and headers as the pieces fast_append copies.
 */

/* A length-prefixed field (bytes or None: length -1) as pieces; the
 * varint goes to scratch. Returns the pieces added. */
static int
field_pieces(Piece *pieces, unsigned char *scratch, const char *ptr,
             Py_ssize_t len)
{
    pieces[0].ptr = (const char *)scratch;
    pieces[0].len = put_varlong(scratch, ptr == NULL ? -1 : len);
    if (ptr == NULL) {
        return 1;
    }
    pieces[1].ptr = ptr;
    pieces[1].len = len;
    return 2;
}

/* A record's key and value (bytes or None) as pieces, their lengths'
 * varints in scratch[0..20). Returns the pieces added (2 to 4). */
static int
kv_pieces(Piece *pieces, unsigned char *scratch, PyObject *key,
          PyObject *value)
{
    PyObject *fields[2] = {key, value};
    int n = 0;

    for (int i = 0; i < 2; i++) {
        int none = fields[i] == Py_None;
        n += field_pieces(pieces + n, scratch + 10 * i,
                          none ? NULL : PyBytes_AS_STRING(fields[i]),
                          none ? 0 : PyBytes_GET_SIZE(fields[i]));
    }
    return n;
}

/* A record's headers as pieces, as records.py's encode_record_tail writes
 * them: their count, then each key (UTF-8) and value (bytes or None), each
 * with its length. headers: NULL or None (no headers), or a list (as both
 * facades' checks want) of at most MAX_C_HEADERS (str, bytes or None)
 * pairs whose size bound (HEADER_ROOM each, plus keys and values) is below
 * budget. Returns the pieces added, or -1 for anything else (the Python
 * path; no exception set); *size is the keys' and values' bytes (-1: no
 * headers). The one check of a record's headers on the C path. */
static int
header_pieces(PyObject *headers, Py_ssize_t budget, Piece *pieces,
              unsigned char *scratch, Py_ssize_t *size)
{
    Py_ssize_t count = 0;

    *size = -1;
    if (headers != NULL && headers != Py_None) {
        if (!PyList_CheckExact(headers)
            || PyList_GET_SIZE(headers) > MAX_C_HEADERS)
        {
            return -1;
        }
        count = PyList_GET_SIZE(headers);
        *size = count ? 0 : -1;  /* (as the Python path counts an empty list) */
    }
    pieces[0].ptr = (const char *)scratch;
    pieces[0].len = put_varlong(scratch, count);
    int n = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyList_GET_ITEM(headers, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2
            || !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0)))
        {
            return -1;
        }
        PyObject *hkey = PyTuple_GET_ITEM(pair, 0);
        PyObject *hvalue = PyTuple_GET_ITEM(pair, 1);
        if (hvalue != Py_None && !PyBytes_CheckExact(hvalue)) {
            return -1;
        }
        Py_ssize_t key_len;
        const char *key_utf8 = PyUnicode_AsUTF8AndSize(hkey, &key_len);
        if (key_utf8 == NULL) {
            PyErr_Clear();  /* (a lone surrogate: Python raises its error) */
            return -1;
        }
        n += field_pieces(pieces + n, scratch + 10 * (2 * i + 1), key_utf8,
                          key_len);
        Py_ssize_t value_len = hvalue == Py_None ? 0 : PyBytes_GET_SIZE(hvalue);
        n += field_pieces(pieces + n, scratch + 10 * (2 * i + 2),
                          hvalue == Py_None ? NULL : PyBytes_AS_STRING(hvalue),
                          value_len);
        *size += key_len + value_len;
        budget -= HEADER_ROOM + key_len + value_len;
        if (budget <= 0) {
            return -1;  /* (too large for the C path: Python checks the size) */
        }
    }
    return n;
}

/* Append a record: its key and value (bytes or None) and headers (see
 * header_pieces) encoded here. SEND_SLOW: headers the C path does not
 * take. */
int
append_kvh(FastAppend *self, Py_ssize_t deque_id, int64_t version,
           int64_t timestamp, int64_t now_ms, PyObject *key, PyObject *value,
           PyObject *headers, Py_ssize_t header_budget, int may_open, Hit *hit,
           Py_ssize_t *header_size)
{
    unsigned char scratch[10 * (2 + 2 * MAX_C_HEADERS + 1)];
    Piece pieces[5 + 1 + 4 * MAX_C_HEADERS];
    int n = kv_pieces(pieces, scratch, key, value);
    int added = header_pieces(headers, header_budget, pieces + n, scratch + 20,
                              header_size);
    if (added < 0) {
        return SEND_SLOW;
    }
    return fast_append(self, deque_id, version, timestamp, now_ms, pieces,
                       n + added, may_open, hit);
}

/* Append a record without headers: its key and value (bytes or None)
 * encoded here (append_kvh's work without its header pieces: the common
 * record's). */
int
append_kv(FastAppend *self, Py_ssize_t deque_id, int64_t version,
          int64_t timestamp, int64_t now_ms, PyObject *key, PyObject *value,
          int may_open, Hit *hit)
{
    static const char no_headers = 0;
    unsigned char scratch[20];
    Piece pieces[5];
    int n = kv_pieces(pieces, scratch, key, value);

    pieces[n].ptr = &no_headers;
    pieces[n++].len = 1;
    return fast_append(self, deque_id, version, timestamp, now_ms, pieces, n,
                       may_open, hit);
}
