"""THE memory map of a pool segment: every region, every field, and who writes it.

All integers are little-endian (the segment never leaves the host). Regions are laid out in
this order, each starting on an 8-byte boundary and the slabs on a page boundary; offsets are
a pure function of ``PoolConfig``, so every process computes the same map.

Rules:
- A field is written only by the process named for it, or under the lock named for it.
- "Publish last": multi-field updates readers may see without a lock are ordered so that the
  field that makes new data visible is written last, in one store of at most 8 aligned
  bytes (a process may be killed between any two instructions, and ``pack_into`` of a
  multi-field struct is many stores).
- Nothing outside this module hard-codes an offset: the C append gets every offset it uses
  from pool/fastpath.py's ``fast_path_offsets`` (tests/pool/test_fastpath_offsets.py).

Region 1 - HEADER (512 bytes)
    off  type     field                  written by
      0  8s       magic "SHMKAFKA"       creator, once
      8  u32      layout_version         creator, once
     12  u32      config_len             creator, once
     16  u64      segment_size           creator, once
     24  32s      config_fingerprint     creator, once (SHA-256 of the config JSON)
     56  i64      created_ms             creator, once
     64  u64      directory_version      directory writer (the Sender), under the directory lock
     72  u32      deques_used            directory writer, under the directory lock
     76  u32      slots_high             the slot table's claimer, under the slot-table lock:
                                         one past the highest slot ever claimed (slots at
                                         and above it are unreserved memory: never read)
     80  i32      sender_pid             the Sender
     84  u32      alloc_cursor           allocating processes, under the pool lock: where
                                         the next search for a free run starts (next fit:
                                         batches are freed about in the order they were
                                         taken, so the memory ahead is one long hole)
     88  i64      sender_start           the Sender
     96  i64      sender_heartbeat_ms    the Sender
    104  u64      waitq_head             allocating processes, under the pool lock
    112  u64      waitq_tail             allocating processes, under the pool lock
    120  i64      producer_id            the Sender (idempotence; -1 none yet)
    128  i32      producer_epoch         the Sender
    132  u32      topic_requests         producers and the Sender, under the directory lock
    136  6 x u64  sender_stats           the Sender: produce requests, batches sent, records
                                         sent, retries, errors, expired (for `shmkafka stat`)
    184  i64      sender_wake_at_ms      the Sender: when it will next look at the deques by
                                         itself (monotonic ms; 0 while it is looking)
    192  i64      sender_linger_ms       the Sender, at start
    200  u64      new_batches            the C append path (a batch opened): a change the
                                         Sender checks before it sleeps (see client.py)
    208  u64      sender_bytes_sent      the Sender: request bytes written to brokers
    216  u64      events_published       the Sender: how many EVENTS it has written (the
                                         last one publishes an entry; see events.py)
    224  u64      brokers_version        the Sender: odd while it rewrites BROKER STATS,
                                         even once they are whole (broker_stats.py)
    232  5 x u64  sender_record_stats    the Sender: records failed (errors, expiry), records
                                         retried, produce responses, the sum of their
                                         latencies in ms, record batch bytes sent
                                         (sender_counters.py; each field one aligned store)
    272  u64      refusals               the Sender, under the directory lock (REFUSALS)
    280  u32      topic_count            directory writer, under its lock: TOPICS in use
    284  u32      partition_entries      directory writer: PARTITIONS entries in use
    288  u64      names_epoch            directory writer: odd while it rewrites the name
                                         of a forgotten topic's entry (readers re-read)
    296  u16      cluster_id length      the Sender, from Metadata responses: the length
    298  126s     cluster_id             is stored 0 first and last (0: not known yet)
    424  u64      internal_errors        any process, under the pool lock: records whose
                                         process failed them because no result could come
                                         any more (their batch no longer held them; a bug
                                         to find, never a normal path: liveness.py)
    432  u64      commits_started        a committer, under the kernel lock on COMMIT_BYTE
    440  u64      commits_done           a committer, under that lock, after its msync
    448  8 x u64  recovery_stats         the recovering process, then the Sender (the
                                         counts recovery.py names)
Reservation. The segment file is sized for every region at creation, but only the fixed
    regions' memory is taken then (posix_fallocate). SLOTS, TOPICS, PARTITIONS, DEQUES and
    ACTIVE grow: whoever first uses a page of them reserves it first (``Segment.reserve``),
    so a full /dev/shm is a typed error at that moment, never a SIGBUS. Nothing reads a
    page of them that no count has published: a read fault on a hole of a shared tmpfs
    mapping takes a page too.
Region 2 - CONFIG: the config JSON (4096 bytes), creator, once.
Kernel record locks (``lockf``) on single bytes of the segment file, released by the kernel
when their holder dies (they guard no bytes of the map; the byte is only a name):
    byte 0 = lock recovery (locks.py), 1 = the slot table (slots.py), 2 = held by the
    running Sender for its whole life (one Sender per pool), 3 = held by a producer while it
    checks for a live Sender and starts one (sender_link.py), 4 = held by a producer while
    it answers the OAUTHBEARER token board (tokens.py), 5 = held by a producer while it
    posts a command on the transaction board (txn_board.py), 6 = held by a producer while it
    writes the SASL credentials board (credentials.py), 7 = held by a committer of a
    durable pool while it writes commit records and syncs (durability.py). Their order with
    the pool locks is one order, shm/lockdep.py's.
Region 3 - LOCKS: per lock a LOCK record (16 bytes), written by the holder right after
    acquiring and cleared by it before releasing:
      0  i32 owner_slot (-1 none)         LOCK_OWNER_SLOT
      4  i32 owner_pid                    LOCK_OWNER_PID
      8  i64 owner_start                  LOCK_OWNER_START
    lock 0 = the pool lock (BufferPool, process slots, wait queue); lock 1 = the directory
    writer lock; locks 2.. = the partition-deque stripes (deque id % lock_stripes).
Region 4 - SLOTS (grows): per process slot, SLOT_HEADER then the intent bytes then the
    completion ring; a slot's pages are reserved when it is first claimed.
      0  u32 state (0 free, 1 active)     attaching process, under the pool lock
      4  i32 pid                          attaching process, under the pool lock
      8  i64 start_time                   attaching process, under the pool lock
     16  u32 pending_first_slab           owner, under the pool lock (an allocation not yet
     20  u32 pending_slab_count                  owned by a batch; freed if the owner dies)
     24  u64 ring_head                    owner (the reader of its ring)
     32  u64 ring_tail                    the Sender (the writer of the ring)
     40  u32 awaiting                     owner (1 while a thread of it waits for a result,
                                          as get(): woken at once, pool/result_wakes.py)
     48  u64 pid_ns                       attaching process, under the slot-table lock: the
                                          inode of its PID namespace (0: unknown); a slot of
                                          another namespace is never judged dead (slots.py)
     56  u32 waiting_alloc                owner, under the pool lock (1 while in the wait queue)
     60  u32 flushing                     owner (1 while its flush() or close() waits: the
                                          Sender then sends every batch without lingering)
    then n_locks intent bytes: byte X is 1 while the owner acquires, holds or releases lock X
    (written by that process only; lets a waiter recover a lock whose holder died between
    taking the semaphore and recording itself as owner). Then ring_capacity completion
    entries of RING_ENTRY (min(num_slabs, RING_CAP): slots stay small; when a process's
    ring is full the Sender holds the completion, and the batch's slabs, and posts it later).
Region 5 - TOPICS (grows): max_topics TOPIC entries, append-only, written by the directory
    writer (the Sender) under the directory lock; entry i is visible once topic_count > i:
      0  u16 name_len, 250s name          written once, before topic_count publishes it
    256  u64 shape                        partition_count | first_entry << 32: the topic's
                                          PARTITIONS range, replaced whole (one store) when
                                          the topic grows: its new range is written first.
                                          RETIRED (bit 31 of the count): an idle topic whose
                                          deques went back to the writer; its range keeps
                                          the partitions' sequences for when it comes back
Region 5b - PARTITIONS (grows): 2 x max_partitions PARTITION entries, append-only (a grown
    topic takes a new range):
      0  u32 deque_id                     written before the shape that covers the entry
      4  u32 saved sequence + 1           a retired topic's next_sequence (0: none)
      8  i32 leader, i32 leader_epoch     one u64 store, by the directory writer
    After each change the writer bumps directory_version, stored last (see directory.py).
    Appenders compare the version they resolved a route at with the current one under the
    deque's stripe lock: the writer retires a topic holding its stripe locks and bumps the
    version before it lets go, so no record reaches a deque after it was given back.
Region 6 - DEQUES (grows): per deque a DEQUE_HEADER, under the deque's stripe lock unless
    said otherwise. A deque is a linked list of batches through their descriptors' B_NEXT:
      0  u64 ends                         D_ENDS: first batch id | last batch id << 32
                                          (NO_BATCH | NO_BATCH << 32 when empty), one
                                          store: a push writes the old last's B_NEXT, then
                                          ends; readers walk from first and stop at last
      8  u32 topic                        D_TOPIC: the topic's TOPICS index (written when
                                          the deque is given to a partition)
     12  u32 reserved
     16  i32 partition                    D_PARTITION
     20  u32 run_hint                     D_RUN_HINT: how many slabs the partition's next
                                          batch asks for (0: one). Written under the stripe
                                          lock: by the Sender when it drains a batch (twice
                                          the slabs it filled), by an appender that finds the
                                          last batch full (twice that batch's run); capped at
                                          the config's max_run (see accumulator.py)
     24  i32 next_sequence                D_NEXT_SEQUENCE
     28  u32 sticky                       D_STICKY
    ``sticky`` is used in the deque of a topic's partition 0 only: the topic's current
    sticky partition + 1 (0 none) for keyless records, written by any producer without a
    lock (one aligned u32 store; a lost race only picks another random partition).
Region 6b - ACTIVE (grows): one byte per deque, 1 while it may hold batches: set under the
    stripe lock before a batch is pushed, cleared by the Sender under the stripe lock when it
    finds the deque empty. The Sender looks only at active deques (a scan of these bytes),
    so idle partitions cost it nothing per round.
Region 7 - BATCHES: one BATCH descriptor per slab (a batch owns a run of >= 1 slabs and
    is named by the first; a drained batch's unused tail is given back: its slab_count
    shrinks first, then the free map frees the tail, so a Sender killed between the two
    leaks slabs that the next Sender's start reclaims, pool.reclaim_unowned), under the
    stripe lock of its deque while queued; by the Sender once drained:
      0  u32 state                        B_STATE (FREE, OPEN, SEALED, IN_FLIGHT)
      4  u32 generation                   B_GENERATION
      8  u32 deque                        B_DEQUE
     12  u32 first_slab                   B_FIRST_SLAB (= the batch id)
     16  u32 slab_count                   B_SLAB_COUNT
     20  u32 attempts                     B_ATTEMPTS
     24  u32 write_pos                    B_WRITE_POS     } the publish word B_PUBLISH,
     28  u32 record_count                 B_RECORD_COUNT  } stored whole (8 bytes)
     32  i64 max_timestamp                B_MAX_TS (= B_PUBLISH_TIMES)
     40  i64 last_append_ms               B_LAST_APPEND
     48  i64 base_timestamp               B_BASE_TS
     56  i64 created_ms                   B_CREATED
     64  i64 producer_id                  B_PRODUCER_ID
     72  i16 producer_epoch, 2 pad        B_PRODUCER_EPOCH
     76  i32 base_sequence                B_BASE_SEQUENCE
     80  u32 recovered, 28s reserved      B_RECOVERED: 1 for a batch recovery.py made (was
                                          the appenders set, now region 7b)
    112  u32 parent batch                 B_PARENT (the Sender; see PARENT)
    116  u32 parent generation            B_PARENT_GENERATION
    120  u32 parent delta                 B_PARENT_DELTA
    124  u32 next batch of its deque     B_NEXT (under the stripe lock; meaningless
                                          for the deque's last batch)
Region 7b - APPENDERS: per batch a bit set of the process slots that appended to it
    (appenders_size = max_processes / 8 bytes, rounded up to 8), under the stripe lock.
Region 8 - FREEMAP: one byte per slab, 0 free / 1 used, under the pool lock.
Region 9 - WAITQ: max_processes u32 slot ids, a FIFO ring indexed by the header's
    waitq_head/waitq_tail, under the pool lock.
Region 10 - TOPIC REQUESTS: TOPIC_REQUEST_SLOTS entries (u16 len, 250s name) of topics
    that app processes are waiting for, appended by producers and consumed by the Sender,
    both under the directory lock; the header's topic_requests counts them (a producer that
    finds them full asks again once the Sender took them).
Region 10b - REFUSALS: a ring of REFUSAL_SLOTS entries (u16 len, 250s name, u16 limit, u32
    needed) of topics the Sender could not add to the directory, and which limit refused
    them (REFUSED_*), written by the Sender under the directory lock; refusal n (from 1)
    is entry (n - 1) % REFUSAL_SLOTS, made visible by the header's refusals count.
Region 11 - EVENTS: a ring of EVENT_SLOTS entries of EVENT (256 bytes), written by the
    Sender only: the errors every producer's app must hear of (connection, resolution,
    authentication, metadata: librdkafka's error codes) and the Sender's own log lines.
    Event n (from 1) is at entry (n - 1) % EVENT_SLOTS:
      0  u64 seq                          E_SEQ: 0 while written, then n (stored last)
      8  i64 wall_ms                      when
     16  i32 code                         a librdkafka error code (0 for a log line)
     20  u8  level                        logging level / 10 (2 INFO, 3 WARNING, 4 ERROR)
     21  u8  kind                         0 an error (error_cb), 1 a log line
     22  u8  fatal                        1 if the error is fatal
     23  pad
     24  u16 text_len, then 230 bytes of UTF-8 text
Region 12 - BROKER STATS: BROKER_SLOTS entries of BROKER (168 bytes), the Sender's
    counters per broker connection for statistics (librdkafka's ``brokers``), rewritten by
    the Sender every STATS interval between two moves of ``brokers_version``:
      0  i32 node_id (bootstrap servers: negative)   4  u8 state   5  u8 used (1: an entry)
      6  u16 name_len, 8 64s name ("host:port")
     72  u64 tx, txbytes, rx, rxbytes, connects, disconnects
    120  u32 waitresp_cnt, outbuf_cnt
    128  i64 rtt_min_us, rtt_max_us, rtt_sum_us, u64 rtt_cnt
    160  i64 state_since_ms (monotonic)
Region 13 - TOKEN: the OAUTHBEARER token board (tokens.py): u64 asked (the Sender: the
    number of the token it wants), u64 answered (the producer that wrote the token, last),
    i64 expiry_ms (wall clock), u32 length, 4 pad, TOKEN_MAX bytes of token. Producers
    write under the kernel lock on TOKEN_BYTE. The segment is its owner's only (0600).
Region 13a - CREDENTIALS: the SASL credentials given by ``set_sasl_credentials``
    (credentials.py), for the Sender's next authentication: u64 version (0: none given; odd
    while a producer writes, under the kernel lock on CREDENTIALS_BYTE; stored last), u16
    username length, u16 password length, 4 pad, CREDENTIALS_MAX bytes: the username's then
    the password's UTF-8. Secrets: the segment is its owner's only (0600).
Region 13b - TXN: the transaction board of a transactional pool (txn_board.py): the app's
    commands to the Sender's TransactionManager, its answers and the state it keeps there
    so that a restarted Sender resumes (TXN_HEADER, the answers, TXN_PAYLOAD_MAX bytes of
    payload):
      0  u64 posted, u32 command, u32 generation   the producer posting, under the kernel lock
     16  i32 owner_pid, u32 payload_len            on TXN_BYTE; ``posted`` stored last
     24  i64 owner_start
     32  u64 taken                         the Sender: the last command it took
     40  u64 answered                      the Sender: the last command answered (stored last)
     53  u8 state, u8 started              the Sender (48..52 and 64..255 reserved)
     56  u32 owner_generation              the Sender: the generation whose INIT it took
     60  u32 poster_slot                   the producer posting: the slot to wake with the answer
    then TXN_ANSWER_SLOTS answers (TXN_ANSWER), the one to command n at n % TXN_ANSWER_SLOTS,
    written by the Sender, its number last (a poster reads its own even after the next
    command was posted): u64 number, i32 code, u8 action, pad, u16 text_len, 240s text
Region 13c - COMMITS, 6c - DEQUE RECORDS (grows, after ACTIVE): durable pools only: two
    COMMIT records per batch (its producer id, epoch and sequence among them), two DREC (the
    topic and partition) per deque, each ending in its
    CRC32C, written by a committer under the kernel lock on COMMIT_BYTE (durability.py).
Region 14 - SLABS: num_slabs x slab_size bytes of record batches (config.py: SLAB_SIZE, or
    batch_size when that is smaller), written by the appender
    holding the deque's stripe lock (records), and by the Sender (batch header at drain).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from shmkafka.shm.config import PoolConfig

MAGIC = b"SHMKAFKA"
# 2: the EVENTS, BROKER STATS and TOKEN regions; 3: rings of RING_CAP; 4: slabs of slab_size
# (batches are runs that grow up to batch_size), the deques' run_hint; 5: regions that grow
# (reserved on first use), an append-only directory, deques as linked lists, ACTIVE,
# APPENDERS sized by max_processes, REFUSALS; 6: idle topics retired (RETIRED shapes, saved
# sequences), their deques reused; appenders check the directory version under the stripe lock;
# 7: the TXN board; 9: the CREDENTIALS board
# 10: durable pools (COMMITS, DEQUE RECORDS, the commit and recovery header fields); 11:
# no IDEM region (a batch's commit record carries its producer)
LAYOUT_VERSION = 11
RING_CAP = 512  # completion entries per process slot at most (a full ring: the Sender retries)
PAGE = 4096

HEADER_SIZE = 512
HEADER_FIXED = struct.Struct("<8sIIQ32sq")  # magic .. created_ms at offset 0
H_DIRECTORY_VERSION = 64
H_DEQUES_USED = 72
H_SLOTS_HIGH = 76
H_SENDER_PID = 80
H_ALLOC_CURSOR = 84
H_SENDER_START = 88
H_SENDER_HEARTBEAT = 96
H_WAITQ_HEAD = 104
H_WAITQ_TAIL = 112
WAITQ_ENTRY = 4  # a u32 slot id in the WAITQ ring
H_PRODUCER_ID = 120
H_PRODUCER_EPOCH = 128
H_TOPIC_REQUESTS = 132
H_SENDER_STATS = 136
SENDER_STATS = struct.Struct("<6Q")
H_SENDER_WAKE_AT = 184
H_SENDER_LINGER = 192
H_NEW_BATCHES = 200
H_SENDER_BYTES = 208
H_EVENTS_PUBLISHED = 216
H_BROKERS_VERSION = 224
H_SENDER_RECORD_STATS = 232
SENDER_RECORD_STATS = struct.Struct("<5Q")
H_REFUSALS = 272
H_TOPIC_COUNT = 280
H_PARTITION_ENTRIES = 284
H_NAMES_EPOCH = 288
H_CLUSTER_ID = 296  # u16 length, then CLUSTER_ID_MAX bytes of UTF-8
CLUSTER_ID_MAX = 126
H_INTERNAL_ERRORS = 424
H_COMMITS_STARTED = 432
H_COMMITS_DONE = 440
H_RECOVERY_STATS = 448
RECOVERY_STATS = struct.Struct("<8Q")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
I32 = struct.Struct("<i")
U64 = struct.Struct("<Q")
I64 = struct.Struct("<q")

CONFIG_SIZE = 4096

RECOVERY_BYTE = 0  # kernel record locks: bytes of the segment file (see the map above)
SLOT_TABLE_BYTE = 1
SENDER_BYTE = 2
SPAWN_BYTE = 3
TOKEN_BYTE = 4
TXN_BYTE = 5
CREDENTIALS_BYTE = 6
COMMIT_BYTE = 7

LOCK = struct.Struct("<iiq")  # owner_slot, owner_pid, owner_start
LOCK_OWNER_SLOT = 0
LOCK_OWNER_PID = 4
LOCK_OWNER_START = 8
POOL_LOCK = 0
DIRECTORY_LOCK = 1
FIRST_STRIPE_LOCK = 2

SLOT_HEADER = struct.Struct("<IiqIIQQIIQII")
SLOT_HEADER_SIZE = 64
S_STATE = 0
S_PID = 4
S_START = 8
S_PENDING = 16  # PENDING: u32 first slab, u32 count
S_PENDING_COUNT = 20
S_RING_HEAD = 24
S_RING_TAIL = 32
S_PID_NS = 48
S_AWAITING = 40
S_WAITING_ALLOC = 56
S_FLUSHING = 60
PENDING = struct.Struct("<II")
NO_SLAB = 0xFFFFFFFF

# batch_id, generation, base_offset, log_append_time, log_start_offset, error_code,
# attempts, first_delta, last_delta, node_id, queued_ms, request_ms: the result covers the
# batch's records whose offset delta is in [first_delta, last_delta], the record at
# first_delta having offset base_offset (a split batch completes its parent in parts). The
# last four are the Sender's view, for tracing: how many produce requests carried the batch,
# the broker node of the last, how long the batch waited from its creation to that request,
# and that request's round trip (-1: not known, e.g. acks=0 or a batch never sent).
RING_ENTRY = struct.Struct("<IIqqqhHIIiii4x")
ALL_DELTAS = 0xFFFFFFFF

EVENT = struct.Struct("<QqiBBBxH230s")
E_SEQ = 0
EVENT_SLOTS = 64
BROKER = struct.Struct("<iBBH64s6QIIqqqQq")
BROKER_SLOTS = 32
TOKEN_HEADER = struct.Struct("<QQqI4x")  # asked, answered, expiry_ms, length
TOKEN_MAX = 8192
CREDENTIALS_HEADER = struct.Struct("<QHH4x")  # version, username length, password length
CREDENTIALS_MAX = 2048
# posted, command, generation, owner_pid, payload_len, owner_start, taken, answered, state,
# started, owner_generation, poster_slot
TXN_HEADER = struct.Struct("<QIIiIqQQ5xBBxII192x")
TXN_ANSWER = struct.Struct("<QiBxH240s")  # number, code, action, text_len, text
TXN_ANSWER_SLOTS = 8
TXN_PAYLOAD_MAX = 32768

TOPIC_REQUEST = struct.Struct("<H250s")
TOPIC_REQUEST_SLOTS = 1024
TOPIC_NAME = struct.Struct("<H250s")  # a TOPICS entry's name, at its offset 0
TOPIC_SHAPE = 256  # u64 partition_count | first_entry << 32
RETIRED = 1 << 31  # in a shape's partition count: the topic was retired (directory.py)
TOPIC_ENTRY_SIZE = 264
PARTITION_ENTRY_SIZE = 16
P_DEQUE = 0
P_LEADER = 8  # i32 leader, i32 leader_epoch: one u64
REFUSAL = struct.Struct("<H250sHI")
REFUSAL_SLOTS = 256
# Which limit refused a topic (a REFUSAL's u16)
REFUSED_TOPICS, REFUSED_PARTITIONS, REFUSED_MEMORY = 1, 2, 3

DEQUE_HEADER = struct.Struct("<QIIiIiI")
DEQUE_SIZE = 32
D_ENDS = 0  # u64 first | last << 32
D_TOPIC = 8
D_PARTITION = 16
D_RUN_HINT = 20
D_NEXT_SEQUENCE = 24
D_STICKY = 28
NO_BATCH = 0xFFFFFFFF
EMPTY_ENDS = 0xFFFFFFFFFFFFFFFF  # NO_BATCH | NO_BATCH << 32

# The batch descriptor. Two stores make it crash-consistent, because a process can be
# killed between any two instructions (and struct.pack_into is no single store: it zeroes
# its target, then writes field by field):
# - Publishing a record: the record's bytes, then PUBLISH_TIMES (max_ts, last_append_ms),
#   then the publish word (write_pos | record_count << 32) as one aligned 8-byte store. A
#   reader sees the old word or the new one, never a partial record.
# - Opening a batch: every field is written while the state is FREE, the state last. A
#   descriptor whose state is not FREE is whole (its deque, slab run, times).
BATCH = struct.Struct("<IIIIIIIIqqqqqhxxi32x")
B_STATE = 0
B_GENERATION = 4
B_DEQUE = 8
B_FIRST_SLAB = 12
B_SLAB_COUNT = 16
B_ATTEMPTS = 20
B_PUBLISH = 24  # u32 write_pos, u32 record_count, i64 max_ts, i64 last_append_ms
PUBLISH = struct.Struct("<IIqq")  # for reading; writes go through batches.publish_record
B_WRITE_POS = B_PUBLISH  # the publish word's low half
B_RECORD_COUNT = 28  # the publish word's high half
B_MAX_TS = 32
B_LAST_APPEND = 40
B_PUBLISH_TIMES = B_MAX_TS  # max_ts, last_append_ms
PUBLISH_TIMES = struct.Struct("<qq")
B_BASE_TS = 48
B_CREATED = 56
B_PRODUCER_ID = 64
B_PRODUCER_EPOCH = 72
B_BASE_SEQUENCE = 76
B_RESERVED_80 = 80  # 32 bytes, once the appenders set (now region 7b)
B_RECOVERED = B_RESERVED_80  # u32: made by recovery.py (zeroed by every open)
# A batch split out of a larger one (MESSAGE_TOO_LARGE) completes its parent's records:
# parent batch id (NO_PARENT if none), parent generation, the parent's offset delta of its
# first record. Written by the Sender.
B_PARENT = 112
B_PARENT_GENERATION = 116
B_PARENT_DELTA = 120
PARENT = struct.Struct("<III")
NO_PARENT = 0xFFFFFFFF
B_NEXT = 124
BATCH_SIZE_BYTES = 128

# Opening a batch writes the descriptor after state and generation in one pack.
BATCH_BODY = struct.Struct("<" + BATCH.format[3:])

# The leading fields an appender needs, up to base_ts: one unpack on the hot path.
APPEND_VIEW = struct.Struct("<IIIIIIIIqqq")

# Durable pools' records (durability.py). A COMMIT: number, generation, state (COMMIT_LIVE,
# COMMIT_DONE), deque, slab_count, write_pos, record_count, parent, parent generation and
# delta, base_ts, created_ms, producer_id, epoch, base_sequence, CRC32C of the records (slab
# bytes 61..write_pos), then the CRC32C of the record's bytes before it.
COMMIT = struct.Struct("<QIIIIIIIIIqqqhxxiI4xI")
COMMIT_LIVE, COMMIT_DONE = 1, 2
DREC = struct.Struct("<Qi4xH250sI")  # number, partition, name_len, name, crc

# Batch states (4 was DONE, never set: not reused).
FREE, OPEN, SEALED, IN_FLIGHT = 0, 1, 2, 3
STATE_NAMES = {FREE: "FREE", OPEN: "OPEN", SEALED: "SEALED", IN_FLIGHT: "IN_FLIGHT"}


def _align(n: int, to: int = 8) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class Layout:
    """Offsets of every region for one PoolConfig."""

    config: PoolConfig
    n_locks: int
    slot_size: int
    ring_capacity: int
    appenders_size: int
    locks_at: int
    slots_at: int
    topics_at: int
    partitions_at: int
    partition_capacity: int
    deques_at: int
    deque_size: int
    active_at: int
    drecs_at: int
    batches_at: int
    appenders_at: int
    freemap_at: int
    waitq_at: int
    topic_requests_at: int
    refusals_at: int
    events_at: int
    brokers_at: int
    token_at: int
    credentials_at: int
    txn_at: int
    commits_at: int
    slabs_at: int
    size: int

    @classmethod
    def for_config(cls, config: PoolConfig) -> Layout:
        n_locks = FIRST_STRIPE_LOCK + config.lock_stripes
        num_slabs = config.num_slabs
        ring_capacity = min(num_slabs, RING_CAP)
        slot_size = _align(
            _align(SLOT_HEADER_SIZE + n_locks) + ring_capacity * RING_ENTRY.size, PAGE
        )  # (whole pages: a slot's memory is reserved when it is first claimed)
        appenders_size = _align(-(-config.max_processes // 8))
        partition_capacity = 2 * config.max_partitions  # (a topic that grows takes a new range)
        locks_at = HEADER_SIZE + CONFIG_SIZE
        slots_at = _align(locks_at + n_locks * LOCK.size, PAGE)
        topics_at = slots_at + config.max_processes * slot_size
        partitions_at = _align(topics_at + config.max_topics * TOPIC_ENTRY_SIZE, PAGE)
        deques_at = _align(partitions_at + partition_capacity * PARTITION_ENTRY_SIZE, PAGE)
        active_at = _align(deques_at + config.max_partitions * DEQUE_SIZE, PAGE)
        durable = config.durable
        drecs_at = _align(active_at + config.max_partitions, PAGE)
        drecs_size = 2 * DREC.size * config.max_partitions if durable else 0
        batches_at = _align(drecs_at + drecs_size, PAGE)
        appenders_at = batches_at + num_slabs * BATCH_SIZE_BYTES
        freemap_at = _align(appenders_at + num_slabs * appenders_size)
        waitq_at = _align(freemap_at + num_slabs)
        topic_requests_at = _align(waitq_at + WAITQ_ENTRY * config.max_processes)
        refusals_at = _align(topic_requests_at + TOPIC_REQUEST_SLOTS * TOPIC_REQUEST.size)
        events_at = _align(refusals_at + REFUSAL_SLOTS * REFUSAL.size)
        brokers_at = _align(events_at + EVENT_SLOTS * EVENT.size)
        token_at = _align(brokers_at + BROKER_SLOTS * BROKER.size)
        credentials_at = _align(token_at + TOKEN_HEADER.size + TOKEN_MAX)
        txn_at = _align(credentials_at + CREDENTIALS_HEADER.size + CREDENTIALS_MAX)
        txn_size = TXN_HEADER.size + TXN_ANSWER_SLOTS * TXN_ANSWER.size + TXN_PAYLOAD_MAX
        commits_at = _align(txn_at + txn_size)
        slabs_at = _align(commits_at + (2 * COMMIT.size * num_slabs if durable else 0), PAGE)
        size = _align(slabs_at + num_slabs * config.slab_size, PAGE)
        return cls(
            config, n_locks, slot_size, ring_capacity, appenders_size, locks_at, slots_at,
            topics_at, partitions_at, partition_capacity, deques_at, DEQUE_SIZE, active_at,
            drecs_at, batches_at, appenders_at, freemap_at, waitq_at, topic_requests_at,
            refusals_at, events_at, brokers_at, token_at, credentials_at, txn_at, commits_at,
            slabs_at, size,
        )  # fmt: skip

    @property
    def grown_regions(self) -> tuple[int, int]:
        """[start, end) of the regions whose memory is reserved on first use (SLOTS to
        ACTIVE); everything else is reserved when the segment is made."""
        return self.slots_at, self.batches_at

    def topic_at(self, index: int) -> int:
        return self.topics_at + index * TOPIC_ENTRY_SIZE

    def partition_entry_at(self, index: int) -> int:
        return self.partitions_at + index * PARTITION_ENTRY_SIZE

    def active_byte_at(self, deque_id: int) -> int:
        return self.active_at + deque_id

    def appenders_of(self, batch_id: int) -> int:
        return self.appenders_at + batch_id * self.appenders_size

    def refusal_at(self, number: int) -> int:
        """Where refusal ``number`` (from 1) is written."""
        return self.refusals_at + (number - 1) % REFUSAL_SLOTS * REFUSAL.size

    def lock_at(self, index: int) -> int:
        return self.locks_at + index * LOCK.size

    def slot_at(self, slot: int) -> int:
        return self.slots_at + slot * self.slot_size

    def intent_at(self, slot: int, lock: int) -> int:
        return self.slot_at(slot) + SLOT_HEADER_SIZE + lock

    def ring_entry_at(self, slot: int, index: int) -> int:
        ring = self.slot_at(slot) + _align(SLOT_HEADER_SIZE + self.n_locks)
        return ring + (index % self.ring_capacity) * RING_ENTRY.size

    def waitq_entry_at(self, index: int) -> int:
        return self.waitq_at + WAITQ_ENTRY * (index % self.config.max_processes)

    def event_at(self, number: int) -> int:
        """Where event ``number`` (from 1) is written."""
        return self.events_at + (number - 1) % EVENT_SLOTS * EVENT.size

    def deque_at(self, deque_id: int) -> int:
        return self.deques_at + deque_id * self.deque_size

    def batch_at(self, batch_id: int) -> int:
        return self.batches_at + batch_id * BATCH_SIZE_BYTES

    def commit_at(self, batch_id: int, copy: int) -> int:
        return self.commits_at + (2 * batch_id + copy) * COMMIT.size

    def drec_at(self, deque_id: int, copy: int) -> int:
        return self.drecs_at + (2 * deque_id + copy) * DREC.size

    def slab_at(self, slab: int) -> int:
        return self.slabs_at + slab * self.config.slab_size

    def stripe_lock(self, deque_id: int) -> int:
        return FIRST_STRIPE_LOCK + deque_id % self.config.lock_stripes
