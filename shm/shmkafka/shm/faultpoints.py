"""Named kill points for reliability tests: ``reached("append.before_publish")`` kills the
calling process with SIGKILL when the environment armed that point. Unarmed, a point costs
one set lookup.

    SHMKAFKA_FAULT_AT=append.before_publish,sender.after_send   # the armed points
    SHMKAFKA_FAULT_FILE=/tmp/fired                               # fire once: the first
                                                                 # process to create it dies
    SHMKAFKA_FAULT_SKIP=250              # the armed points pass 250 times first (a soak
                                         # worker dies at a random record, not the first)

    SHMKAFKA_FAULT_RESERVE_LIMIT=65536   # /dev/shm is "full" once this process reserved
                                         # that many bytes of a pool's growing regions

Points are only on the Python paths (the C append fast path has none): tests that arm app
points force the Python path with ``SHMKAFKA_PURE_PYTHON=1``.
"""

from __future__ import annotations

import errno
import os
import signal

ARMED = frozenset(p for p in os.environ.get("SHMKAFKA_FAULT_AT", "").split(",") if p)
POINTS = frozenset({
    "append.after_allocate",    # app: slabs allocated (pending), no batch owns them yet
    "append.holding_stripe",    # app: inside the partition's stripe lock, opening a batch
    "append.before_publish",    # app: record bytes written, write position not yet
    "directory.after_partitions",  # Sender: a new topic's deques and partitions counted,
                                   # the topic itself not yet (they leak, harmlessly)
    "directory.before_count",   # Sender: a new topic's entry written, not yet counted
    "drain.after_shrink",       # Sender: a drained batch's run shrunk, its tail not freed
    "sender.starting",          # Sender: holds the pool's Sender lock, not yet up
    "sender.after_drain",       # Sender: batches sealed and popped, nothing sent
    "sender.after_send",        # Sender: the Produce request written to the socket
    "sender.before_complete",   # Sender: the broker answered, no completion posted yet
    "topic.before_request_count",  # app: a topic request written under the directory
                                   # lock, not yet counted
    "topic.waiting",            # app: its first send to a new topic waits for metadata
    "txn.commit_posted",        # app: its COMMIT is on the transaction board, unanswered
    "txn.before_end",           # Sender: EndTxn (commit or abort) is due, not yet sent
    "txn.end_sent",             # Sender: EndTxn written to the socket, no answer read
})  # fmt: skip


_skip = int(os.environ.get("SHMKAFKA_FAULT_SKIP", "0"))


def reached(point: str) -> None:
    global _skip
    if point in ARMED:
        if _skip > 0:
            _skip -= 1
            return
        _fire(point)


def _fire(point: str) -> None:
    marker = os.environ.get("SHMKAFKA_FAULT_FILE")
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return  # fired already, in another process
        os.write(fd, point.encode())
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


_reserve_limit = int(os.environ.get("SHMKAFKA_FAULT_RESERVE_LIMIT", "-1"))
_reserved = 0


def check_reserve(length: int, *, fixed: bool) -> None:
    """Raise ENOSPC as a full /dev/shm would, when the armed reserve limit is passed."""
    global _reserved
    if _reserve_limit < 0 or fixed:
        return
    if _reserved + length > _reserve_limit:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    _reserved += length
