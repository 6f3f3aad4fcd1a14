"""confluent-kafka's transactional API on the pool (a mixin of Producer): the calls go to
the Sender through the pool's transaction board (producer/transactions.py) and come back as
librdkafka's errors, which the tests check beside confluent-kafka's own.

Rules:
- Each call takes librdkafka's timeout (seconds; negative: without end). A call that times
  out raises a retriable ``_TIMED_OUT``; the same call again resumes it, and another call
  meanwhile is a retriable ``_CONFLICT``.
- Errors are ``KafkaException(KafkaError)`` with librdkafka's flags: ``txn_requires_abort``
  for an abortable error, ``fatal`` for a fenced or fatal one, ``_STATE`` with librdkafka's
  state name for a call out of order, ``_NOT_CONFIGURED`` without ``transactional.id``.
- ``send_offsets_to_transaction`` takes confluent-kafka's consumer group metadata (the bytes
  ``Consumer.consumer_group_metadata()`` returns), read before anything reaches the pool.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from threading import RLock
from typing import Any

from shmkafka.facades.confluent.records import serve_waiting
from shmkafka.facades.confluent.types import KafkaError, KafkaException
from shmkafka.facades.entry_switch import EntrySwitch
from shmkafka.producer.topics import metadata_poll_s
from shmkafka.producer.transactions import TransactionClient, TxnCallError

# librdkafka's names of the states a call can find (rd_kafka_txn_state2str)
STATE_NAMES = {
    "UNINITIALIZED": "Init", "READY": "Ready", "IN_TRANSACTION": "InTransaction",
    "COMMITTING_TRANSACTION": "CommittingTransaction",
    "ABORTING_TRANSACTION": "AbortingTransaction",
}  # fmt: skip
CGMD_MAGIC = b"CGMDv2:"
NOT_CONFIGURED = "The Transactional API requires transactional.id to be configured"


def group_metadata(cgmd: Any) -> dict[str, Any]:
    """librdkafka's serialized consumer group metadata: magic, i32 generation, then the
    group id, the member id, a null flag and the group instance id, NUL-terminated."""
    if not isinstance(cgmd, bytes):
        raise TypeError(f"expected bytes, {type(cgmd).__name__} found")
    if not cgmd.startswith(CGMD_MAGIC) or len(cgmd) < len(CGMD_MAGIC) + 6:
        raise KafkaException(KafkaError(KafkaError._BAD_MSG, "Invalid consumer group metadata"))
    (generation,) = struct.unpack_from("<i", cgmd, len(CGMD_MAGIC))
    rest = cgmd[len(CGMD_MAGIC) + 4 :]
    group_id, _, rest = rest.partition(b"\0")
    member_id, _, rest = rest.partition(b"\0")
    instance = None if rest[:1] != b"\0" else rest[1:].partition(b"\0")[0].decode()
    return {"group_id": group_id.decode(), "generation_id": generation,
            "member_id": member_id.decode(), "group_instance_id": instance}  # fmt: skip


def offsets_payload(positions: Any, cgmd: Any) -> dict[str, Any]:
    group = group_metadata(cgmd)
    if not isinstance(positions, list):
        raise TypeError("expected list of TopicPartition")
    rows = []
    for tp in positions:
        if not all(hasattr(tp, a) for a in ("topic", "partition", "offset")):
            raise TypeError("expected list of TopicPartition")
        if tp.offset < 0:
            where = f"{tp.topic} [{tp.partition}]"
            raise KafkaException(
                KafkaError(KafkaError._INVALID_ARG, f"Invalid offset {tp.offset} for {where}")
            )
        epoch = getattr(tp, "leader_epoch", None)
        rows.append([tp.topic, tp.partition, tp.offset, getattr(tp, "metadata", None) or "",
                     -1 if epoch is None else epoch])  # fmt: skip
    return {**group, "offsets": rows}


def confluent_error(exc: TxnCallError, state: str) -> KafkaException:
    kind = exc.kind
    if kind == TxnCallError.TIMEOUT:
        error = KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish, "
                           "retry call to resume", retriable=True)  # fmt: skip
    elif kind == TxnCallError.CONFLICT:
        error = KafkaError(KafkaError._CONFLICT, exc.message, retriable=True)
    elif kind == TxnCallError.FENCED:
        error = KafkaError(KafkaError._FENCED, f"Fatal error: {exc.message}", fatal=True)
    elif kind == TxnCallError.FATAL:
        error = KafkaError(exc.code if exc.code > 0 else KafkaError._FATAL, exc.message,
                           fatal=True)  # fmt: skip
    elif kind == TxnCallError.ABORTABLE:
        error = KafkaError(exc.code if exc.code else KafkaError._STATE, exc.message,
                           txn_requires_abort=True)  # fmt: skip
    elif kind == TxnCallError.RETRIABLE:
        error = KafkaError(exc.code or KafkaError._TRANSPORT, exc.message, retriable=True)
    else:  # STATE, NOT_OWNER
        error = KafkaError(KafkaError._STATE, f"Operation not valid in state {state}")
    return KafkaException(error)


class ConfluentTransactions(EntrySwitch):
    """init_transactions, begin_transaction, send_offsets_to_transaction,
    commit_transaction and abort_transaction, as confluent-kafka's Producer has them."""

    _txn: TransactionClient | None
    _check_open: Any  # (the Producer's, as the next ones)
    _handle: Any
    _unassigned: deque[Any]
    _unassigned_lock: RLock
    _append: Any
    _fail_now: Any
    poll: Any

    def _transactions(self) -> TransactionClient:
        self._check_open()
        if self._txn is None:
            raise KafkaException(KafkaError(KafkaError._NOT_CONFIGURED, NOT_CONFIGURED))
        return self._txn

    def _run(self, txn: TransactionClient, call: Any, *args: Any) -> None:
        state = STATE_NAMES.get(txn.state, txn.state)
        try:
            call(*args)
        except TxnCallError as exc:
            raise confluent_error(exc, state) from None

    def init_transactions(self, timeout: float = -1) -> None:
        txn = self._transactions()
        if txn.state != "UNINITIALIZED" and not txn.call_open:  # (librdkafka: init once)
            text = f"Operation not valid in state {STATE_NAMES[txn.state]}"
            raise KafkaException(KafkaError(KafkaError._STATE, text))
        self._run(txn, txn.init, _seconds(timeout))

    def begin_transaction(self) -> None:
        txn = self._transactions()
        self._run(txn, txn.begin)
        self._txn_fast(True)

    def send_offsets_to_transaction(
        self, positions: Any, group_metadata: Any, timeout: float = -1
    ) -> None:
        txn = self._transactions()
        payload = offsets_payload(positions, group_metadata)
        self._run(txn, txn.send_offsets, payload, _seconds(timeout))

    def commit_transaction(self, timeout: float = -1) -> None:
        txn = self._transactions()
        self._txn_fast(False)
        try:
            self._run(txn, txn.commit, _seconds(timeout), self._place_waiting)
        finally:
            self.poll(0)  # (as librdkafka's commit, which flushes: the reports are served)

    def abort_transaction(self, timeout: float = -1) -> None:
        txn = self._transactions()
        self._txn_fast(False)
        self._purge_waiting(txn)
        self._run(txn, txn.abort, _seconds(timeout))

    def _place_waiting(self, deadline: float | None) -> None:
        """A record of the transaction still waiting for its topic's metadata (produce()
        returned) is part of it: it goes into the pool before the commit is asked for, as
        librdkafka's commit flushes its unassigned queue, or the commit times out (resumed by
        calling it again)."""
        began = time.monotonic()
        failed: list[Any] = []

        def fail(record: Any, error: Any) -> None:  # (timed out, or its topic refused)
            failed.append(error)
            self._fail_now(record, error)

        while self._unassigned:
            with self._unassigned_lock:
                serve_waiting(self._unassigned, self._handle, self._append, fail)
            if failed:  # as librdkafka: a record of the transaction failed, it must abort
                raise TxnCallError(TxnCallError.ABORTABLE, 0, "a record of the transaction failed "
                                   f"before it was sent: {failed[0]}")  # fmt: skip
            if not self._unassigned:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TxnCallError(TxnCallError.TIMEOUT, 0, "Timed out waiting for the "
                                   "metadata of the transaction's topics")  # fmt: skip
            time.sleep(metadata_poll_s(time.monotonic() - began))

    def _purge_unassigned(self) -> None:
        """The records still waiting for their topic's metadata fail with _PURGE_QUEUE
        (the Producer's purge(), and an abort: none is appended after it)."""
        with self._unassigned_lock:
            while self._unassigned:
                self._fail_now(self._unassigned.popleft(), KafkaError(KafkaError._PURGE_QUEUE))

    def _purge_waiting(self, txn: TransactionClient) -> None:
        """An abort purges the records still waiting for their topic, as librdkafka's does
        (their reports: _PURGE_QUEUE), so that none is appended after it."""
        if txn.state in ("IN_TRANSACTION", "ABORTING_TRANSACTION"):
            self._purge_unassigned()

    def _check_transactional_produce(self) -> None:
        if self._txn is not None:
            try:
                self._txn.check_send()
            except TxnCallError as exc:
                if exc.kind in (TxnCallError.STATE, TxnCallError.NOT_OWNER):
                    raise KafkaException(KafkaError(
                        KafkaError._STATE, "Unable to produce message: Local: Erroneous state"
                    )) from None  # fmt: skip
                raise confluent_error(exc, self._txn.state) from None


def _seconds(timeout: float) -> float | None:
    return None if timeout is None or timeout < 0 else float(timeout)
