/*
 * The C append's parts, shared by its files (and by no other extension):
 * _append.c (the type's methods, the capsule and the module), _append_setup.c
 * (construction, the memory map it is given, argument checks), _append_locks.c
 * (the pool's locks, and lockdep), _append_write.c (the append itself:
 * records, batches), _append_drain.c (the Sender's drain of a deque's
 * first batch), _append_post.c (the completion rings' two sides) and
 * _append_seal.c (the Sender's sealing of a node's batches into a produce
 * request's body, with lz4 from _append_lz4.c). The Python twins are pool/accumulator.py's append and
 * drain, shm/rings.py's post and poll, and pool/sealing.py's seal.
 */
#ifndef SHMKAFKA_APPEND_INTERNAL_H
#define SHMKAFKA_APPEND_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <limits.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "_append.h"

/* The semaphore calls moved from libpthread into libc in glibc 2.34, which kept the old
 * versions there too. Linking against those old versions lets the wheel run on older
 * distributions as well (manylinux_2_17, not 2_34: auditwheel show, make dist); the calls
 * are the same. Only where libc has the old version (glibc 2.34 on; before, it is
 * libpthread's, and a plain link is already old): x86_64 (2.2.5) and aarch64 (2.17). */
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34) && defined(__x86_64__)
#define SHMKAFKA_OLD_SEM "GLIBC_2.2.5"
#elif defined(__GLIBC__) && __GLIBC_PREREQ(2, 34) && defined(__aarch64__)
#define SHMKAFKA_OLD_SEM "GLIBC_2.17"
#endif
#ifdef SHMKAFKA_OLD_SEM
__asm__(".symver sem_open,sem_open@" SHMKAFKA_OLD_SEM);
__asm__(".symver sem_close,sem_close@" SHMKAFKA_OLD_SEM);
__asm__(".symver sem_post,sem_post@" SHMKAFKA_OLD_SEM);
__asm__(".symver sem_trywait,sem_trywait@" SHMKAFKA_OLD_SEM);
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the pool layout is little-endian; use the pure-Python path here"
#endif

/* Memory is short while fewer than 1/PLENTY_FRACTION of the slabs are free
 * (bufferpool.py's PLENTY_FRACTION). */
#define PLENTY_FRACTION 8
/* record_size_bound (protocol/records.py) less a record's exact size in a
 * batch of its own, at most: 25 bytes, and 8 for each of MAX_C_HEADERS */
#define BOUND_SLACK (32 + 8 * MAX_C_HEADERS)

/* Tries at a taken lock before the slow path takes over. */
#define SPIN_TRIES 200

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct FastAppend {
    PyObject_HEAD
    Py_buffer view;
    int has_view;           /* 0 before __init__ and after close() */
    int initialized;        /* __init__ succeeded: it may not run again */
    sem_t **sems;           /* the stripe locks' semaphores */
    Py_ssize_t n_sems;
    sem_t *pool_sem;        /* the pool lock's (opening a batch) */
    /* The memory map, fastpath.fast_path_offsets: see layout_fields. */
    /* header */
    Py_ssize_t directory_version_at, sender_wake_at, sender_linger_at;
    Py_ssize_t new_batches_at, waitq_head_at, waitq_tail_at, alloc_cursor_at;
    /* locks: the owner records, and our slot's intent bytes */
    Py_ssize_t locks_at, lock_stride;
    Py_ssize_t lock_owner_slot, lock_owner_pid, lock_owner_start;
    Py_ssize_t pool_lock, first_stripe, intent_at0;
    /* our slot's pending allocation */
    Py_ssize_t pending_first_at, pending_count_at, no_slab;
    /* deques */
    Py_ssize_t deques_at, deque_size;
    Py_ssize_t d_ends, no_batch, active_at, b_next, d_sticky, d_run_hint;
    /* batch descriptors */
    Py_ssize_t batches_at, batch_stride;
    Py_ssize_t b_state, b_generation, b_deque, b_first_slab, b_slab_count;
    Py_ssize_t b_attempts, b_publish, b_write_pos, b_record_count;
    Py_ssize_t b_max_ts, b_last_append, b_base_ts, b_created;
    Py_ssize_t b_producer_id, b_producer_epoch, b_base_sequence;
    Py_ssize_t appenders_at, appenders_size;
    Py_ssize_t b_parent, b_parent_generation, b_parent_delta;
    Py_ssize_t b_recovered;
    Py_ssize_t no_parent, free_state, open_state, sealed_state, in_flight_state;
    /* free map and slabs */
    Py_ssize_t freemap_at, num_slabs, slabs_at, slab_size;
    /* a batch grows to max_run slabs and batch_max_records records (0: any);
     * no record's batch is larger than record_limit */
    Py_ssize_t max_run, batch_max_records, record_limit;
    /* process slots' completion rings (_append_post.c) */
    Py_ssize_t slots_high_at, max_processes, slots_at, slot_size;
    Py_ssize_t s_ring_head, s_ring_tail, ring_at, ring_capacity;
    Py_ssize_t ring_entry_size;
    /* Not the map: the record batch header a batch reserves, and us. */
    Py_ssize_t record_batch_header;
    int32_t slot, pid;
    int64_t started;
    /* SHMKAFKA_LOCKDEP=1: shm/lockdep.py's PoolLockHook, told of every take
     * and drop with its call site; NULL otherwise (one branch per lock). */
    PyObject *lockdep;
    /* The Sender's lz4 compression context (_append_seal.c), made on its
     * first compressed batch. */
    void *lz4_cctx;
} FastAppend;

/* Loads and stores of the segment's fields (little-endian, unaligned). */
static inline uint32_t
rd32(const char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t
rd64(const char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void
wr32(char *p, uint32_t v)
{
    memcpy(p, &v, sizeof(v));
}

static inline void
wr64(char *p, uint64_t v)
{
    memcpy(p, &v, sizeof(v));
}

/* One store, ordered after every earlier store (the compiler may not sink
 * those past it): what a publish needs when the writer can be killed between
 * any two instructions. */
static inline void
store_release32(char *p, uint32_t v)
{
    __atomic_store_n((uint32_t *)(void *)p, v, __ATOMIC_RELEASE);
}

static inline void
store_release64(char *p, uint64_t v)
{
    __atomic_store_n((uint64_t *)(void *)p, v, __ATOMIC_RELEASE);
}

/* Batch descriptor `batch_id` (layout.batch_at). */
static inline char *
batch_at(FastAppend *self, uint32_t batch_id)
{
    return ((char *)self->view.buf + self->batches_at
            + (Py_ssize_t)batch_id * self->batch_stride);
}

/* Zigzag varint of a signed 64-bit value; returns bytes written (at most
 * 10). */
static inline int
put_varlong(unsigned char *out, int64_t n)
{
    uint64_t u = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    int i = 0;

    while (u >= 0x80) {
        out[i++] = (unsigned char)(u | 0x80);
        u >>= 7;
    }
    out[i++] = (unsigned char)u;
    return i;
}

typedef struct {
    const char *ptr;
    Py_ssize_t len;
} Piece;

/* _append_setup.c */
int check_nargs(const char *fname, Py_ssize_t nargs, Py_ssize_t expected);
void bad_argument(const char *fname, const char *name, const char *expected,
                  PyObject *arg);
int ssize_arg(const char *fname, const char *name, PyObject *arg,
              Py_ssize_t *out);
int int64_arg(const char *fname, const char *name, PyObject *arg,
              int64_t *out);
int check_open(FastAppend *self, const char *fname);
PyObject *tuple_of(PyTypeObject *type, PyObject **items, Py_ssize_t n);
int append_new(PyObject *list, PyObject *item);
void FastAppend_release(FastAppend *self);
void FastAppend_dealloc(FastAppend *self);
int FastAppend_init(FastAppend *self, PyObject *args, PyObject *kwds);
PyObject *FastAppend_offsets(FastAppend *self, PyObject *ignored);

/* _append_locks.c: a pool lock taken as LockSet.acquire takes it, spinning
 * briefly: 1 taken, 0 busy, -1 with an exception set (lockdep refused it).
 * Take through TAKE_LOCK, which names the call site for lockdep's report. */
int take_lock(FastAppend *self, Py_ssize_t index, sem_t *sem,
              const char *site);
void drop_lock(FastAppend *self, Py_ssize_t index, sem_t *sem);
#define STR_(x) #x
#define STR(x) STR_(x)
#ifndef __FILE_NAME__
#define __FILE_NAME__ __FILE__
#endif
#define TAKE_LOCK(self, index, sem, fn) \
    take_lock((self), (index), (sem), \
              fn " (" __FILE_NAME__ ":" STR(__LINE__) ")")

/* _append_write.c: the append under the stripe lock (see its doc), and a
 * record's key, value and headers encoded as its pieces (append_kv: no
 * headers; append_kvh: SEND_SLOW for headers the C path does not take). */
/* A new batch counted for the Sender (new_batches, atomically, then a full
 * fence): whether the Sender must be woken for it (it would otherwise sleep
 * past linger.ms). */
int sender_needs_wake(FastAppend *self, int64_t now_ms);
int fast_append(FastAppend *self, Py_ssize_t deque_id, int64_t version,
                int64_t timestamp, int64_t now_ms, const Piece *pieces,
                int n_pieces, int may_open, Hit *hit);
int append_kv(FastAppend *self, Py_ssize_t deque_id, int64_t version,
              int64_t timestamp, int64_t now_ms, PyObject *key,
              PyObject *value, int may_open, Hit *hit);
int append_kvh(FastAppend *self, Py_ssize_t deque_id, int64_t version,
               int64_t timestamp, int64_t now_ms, PyObject *key,
               PyObject *value, PyObject *headers, Py_ssize_t header_budget,
               int may_open, Hit *hit, Py_ssize_t *header_size);

/* _append_drain.c: the Sender's drain of one deque's first batch, and its
 * read of the queued deques' heads every round. */
PyObject *FastAppend_drain_first(FastAppend *self, PyObject *const *args,
                                 Py_ssize_t nargs);
PyObject *FastAppend_queued_heads(FastAppend *self, PyObject *const *args,
                                  Py_ssize_t nargs);

/* Where each field of a ring entry begins: rings.RING_ENTRY is
 * "<IIqqqhHIIiii4x" (the differential test checks the format). */
enum {
    E_BATCH = 0, E_GENERATION = 4, E_BASE = 8, E_APPEND = 16, E_START = 24,
    E_CODE = 32, E_ATTEMPTS = 34, E_FIRST = 36, E_LAST = 40, E_NODE = 44,
    E_QUEUED = 48, E_REQUEST = 52, ENTRY_SIZE = 60  /* 4 bytes of padding */
};

/* _append_post.c: the Sender's posting of a batch's result to its rings,
 * and a process's reading of its own ring. */
PyObject *FastAppend_post_result(FastAppend *self, PyObject *const *args,
                                 Py_ssize_t nargs);
PyObject *FastAppend_take_results(FastAppend *self, PyObject *const *args,
                                  Py_ssize_t nargs);
int post_to_appenders(FastAppend *self, const unsigned char *bits,
                      const char *entry, PyObject *posted, PyObject *full);

/* _append_finish.c: the Sender's finish of a response's acknowledged
 * batches: results posted, descriptors freed. */
PyObject *FastAppend_finish_sent(FastAppend *self, PyObject *const *args,
                                 Py_ssize_t nargs);

/* _append_seal.c: the Sender's sealing of one node's drained batches into a
 * produce request's body (lz4 by the lz4 package's own library, which
 * load_lz4 finds), and the lz4 context it keeps. */
PyObject *FastAppend_seal_request(FastAppend *self, PyObject *const *args,
                                  Py_ssize_t nargs);

/* _append_lz4.c: lz4 frames by the lz4 package's library (load_lz4), into
 * a buffer of lz4_frame_bound bytes: the frame's length, or -1 with an
 * exception set; and the context a FastAppend keeps for them. */
PyObject *append_load_lz4(PyObject *module, PyObject *arg);
int lz4_ready(void);
size_t lz4_frame_bound(size_t size, int level);
Py_ssize_t lz4_frame_into(FastAppend *self, char *dst, const char *src,
                          size_t size, int level);
PyObject *FastAppend_lz4_frame(FastAppend *self, PyObject *const *args,
                               Py_ssize_t nargs);
void lz4_release(FastAppend *self);

#endif
