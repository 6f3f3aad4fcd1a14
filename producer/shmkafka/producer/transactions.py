"""A transactional producer's calls, as commands on its pool's transaction board
(shm/txn_board.py), answered by the Sender that runs the transaction
(sender/transactions.py). Each facade turns the outcome into its peer's errors.

Rules:
- One producer object owns the transactional id: ``init`` makes it the owner (a new
  generation; an earlier owner is fenced). A forked child's copy owns nothing: its calls
  and sends raise until it makes its own producer.
- A call that times out leaves its command open. The same call again waits for the same
  answer (confluent-kafka's resumable calls); another call meanwhile is a conflict.
- ``check_send`` runs before a record reaches shared memory: outside a transaction, in an
  error state or fenced, nothing is written.
- Without a cluster (no bootstrap servers: no pool), a call waits out its timeout, as
  librdkafka's does with no broker to ask.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shmkafka.producer.client import Client
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm import faultpoints
from shmkafka.shm import txn_board as board
from shmkafka.shm.txn_board import Answer

# local states (the app's view; the Sender's state on the board decides the rest)
UNINITIALIZED, READY, IN_TRANSACTION = "UNINITIALIZED", "READY", "IN_TRANSACTION"
COMMITTING, ABORTING = "COMMITTING_TRANSACTION", "ABORTING_TRANSACTION"
API_NAMES = {
    board.INIT: "init_transactions", board.BEGIN: "begin_transaction",
    board.OFFSETS: "send_offsets_to_transaction", board.COMMIT: "commit_transaction",
    board.ABORT: "abort_transaction",
}  # fmt: skip
SEND_FAILED = ("Cannot perform send because at least one previous transactional or idempotent "
               "request has failed with errors.")  # fmt: skip
CLOSE_TXN_S = 5.0  # how long close() waits for an open transaction's abort
FATAL_FLUSH_S = 5.0  # how long a failed commit waits for its records' futures
SENDER_ROUND_S = 0.0002  # first wait for an answer; doubles up to MAX_WAIT_S
MAX_WAIT_S = 0.005


class TxnCallError(Exception):
    """A transactional call's outcome other than success (``kind``: one of the board's
    actions, TIMEOUT or CONFLICT); each facade raises its peer's error for it."""

    # the board's actions (shm/txn_board.py), and the client's own outcomes
    RETRIABLE, ABORTABLE, FENCED, FATAL, STATE = (
        board.RETRIABLE, board.ABORTABLE, board.FENCED, board.FATAL, board.STATE,
    )  # fmt: skip
    TIMEOUT = 100
    CONFLICT = 101
    NOT_OWNER = 102

    def __init__(self, kind: int, code: int, message: str) -> None:
        super().__init__(message)
        self.kind, self.code, self.message = kind, code, message


@dataclass
class _Open:
    command: int
    number: int


class TransactionClient:
    def __init__(self, handle: Client | None, transactional_id: str) -> None:
        self.handle = handle
        self.transactional_id = transactional_id
        self.board = None if handle is None else handle.pool.txn
        self.pid = os.getpid() if handle is None else handle.pool.pid
        self.generation = 0  # 0: not the owner yet (no init)
        self.state = UNINITIALIZED
        self._open: _Open | None = None
        self._unread = 0  # a BEGIN posted without waiting: its answer is read next

    # ------------------------------------------------------------------ the calls

    def init(self, timeout_s: float | None) -> None:
        self._same_process()
        self._no_conflict(board.INIT)
        if self._open is None and self.state != UNINITIALIZED:
            return  # (kafka-python: once initialized, init does nothing)
        self._call(board.INIT, None, timeout_s)
        self.state = READY

    def begin(self) -> None:
        self._no_conflict(board.BEGIN)
        self._owned()
        self._check_owner("Cannot execute transactional method because we are in an error "
                          "state")  # fmt: skip
        if self.state != READY:
            raise TxnCallError(board.STATE, 0, self._transition(IN_TRANSACTION))
        # As Java's begin, a local step: the Sender takes the BEGIN before the batches that
        # follow it, and its answer is read by the next call (``_post``).
        self._unread = self._post(board.BEGIN, None, None)
        self.state = IN_TRANSACTION

    def send_offsets(self, payload: dict[str, Any], timeout_s: float | None) -> None:
        self._no_conflict(board.OFFSETS)
        self._owned()
        if self.state != IN_TRANSACTION and self._open_of(board.OFFSETS) is None:
            raise TxnCallError(board.STATE, 0, "Cannot send offsets to transaction because "
                               "the producer is not in an active transaction")  # fmt: skip
        self._call(board.OFFSETS, payload, timeout_s)

    def commit(
        self, timeout_s: float | None, settle: Callable[[float | None], None] | None = None
    ) -> None:
        """``settle(deadline)``, if given, first puts into the pool the records of this
        transaction the process still holds (a facade's records waiting for their topic),
        or raises TxnCallError(TIMEOUT): the commit waits for them as for the others."""
        self._no_conflict(board.COMMIT)
        self._owned("COMMITTING_TRANSACTION")
        if self.state not in (IN_TRANSACTION, COMMITTING):  # (COMMITTING: resumed)
            raise TxnCallError(board.STATE, 0, self._transition("COMMITTING_TRANSACTION"))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.state = COMMITTING  # (sends are refused from now on)
        try:  # (the Sender answers once every record is acknowledged and EndTxn done)
            if settle is not None and self._open is None:
                settle(deadline)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._call(board.COMMIT, None, left)
        except TxnCallError as exc:
            if exc.kind not in (TxnCallError.TIMEOUT, board.RETRIABLE):
                self.state = READY if exc.kind == board.STATE else IN_TRANSACTION
            if exc.kind in (board.FENCED, board.FATAL) and self.handle is not None:
                # (the Sender failed every queued record with it: their futures first)
                with contextlib.suppress(KafkaError):
                    self.handle.flush(FATAL_FLUSH_S)
            raise
        self.state = READY
        if self.handle is not None:  # (their futures resolved too, before commit returns)
            self.handle.flush(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def abort(self, timeout_s: float | None) -> None:
        self._no_conflict(board.ABORT)
        self._owned("ABORTING_TRANSACTION")
        if self.state not in (IN_TRANSACTION, ABORTING):  # (ABORTING: resumed)
            raise TxnCallError(board.STATE, 0, self._transition("ABORTING_TRANSACTION"))
        self.state = ABORTING  # (sends are refused from now on)
        try:
            self._call(board.ABORT, None, timeout_s)
        except TxnCallError as exc:
            if exc.kind not in (TxnCallError.TIMEOUT, board.RETRIABLE):
                self.state = IN_TRANSACTION
            raise
        self.state = READY

    def end_on_close(self, timeout_s: float | None) -> None:
        """The producer closes: a call under way is waited for, an open transaction aborted
        (as Java's close does), so that its Sender does not keep it open for an owner that
        lives on. Bounded by ``timeout_s`` (at most CLOSE_TXN_S); errors are the next
        owner's to see."""
        if self.handle is None or self.generation == 0 or self.forked:
            return
        bound = CLOSE_TXN_S if timeout_s is None else min(timeout_s, CLOSE_TXN_S)
        with contextlib.suppress(TxnCallError, KafkaError):
            if self._open is not None:
                self._call(self._open.command, None, bound)
            elif self.state in (IN_TRANSACTION, COMMITTING, ABORTING):
                self.state = IN_TRANSACTION
                self.abort(bound)

    def check_send(self) -> None:
        """Raises if a record may not be sent now (before anything is written)."""
        if self.state != IN_TRANSACTION or self.forked or self.board is None:
            self._owned()
            raise TxnCallError(board.STATE, 0, f"Cannot call send in state {self.state}")
        self._check_owner()

    def _check_owner(self, failed: str = SEND_FAILED) -> None:
        """Raises if the Sender's transaction failed, or a newer owner fenced us."""
        assert self.board is not None
        sender_state = self.board.state()
        if sender_state in (board.ABORTABLE_ERROR, board.FATAL_ERROR):
            kind = board.ABORTABLE if sender_state == board.ABORTABLE_ERROR else board.FATAL
            raise TxnCallError(kind, 0, failed)
        if self.board.owner_generation() != self.generation:  # (a newer owner's INIT)
            raise TxnCallError(board.FENCED, 0, "a newer producer with the same transactional "
                               "id fenced this one")  # fmt: skip

    @property
    def call_open(self) -> bool:
        """A call timed out and stays open (the next call of the same kind resumes it)."""
        return self._open is not None

    def fast_guard(self) -> tuple[Any, int, int]:
        """The C entry's guard while a transaction is open: the owner generation's word
        must stay ours (a newer owner's INIT changes it). Within the transaction the C
        path skips ``check_send``: a record sent after the transaction became abortable is
        queued, and failed by the abort it needs anyway."""
        assert self.board is not None
        buffer, offset = self.board.generation_word()
        return buffer, offset, self.generation

    @property
    def sender_state(self) -> int:
        return board.UNINITIALIZED if self.board is None else self.board.state()

    def in_fatal_error(self) -> bool:
        """The Sender's transaction manager is in its fatal error state."""
        return self.sender_state == board.FATAL_ERROR

    # ------------------------------------------------------------------ inside

    @property
    def forked(self) -> bool:
        """We are a forked child of the process that made this (its client's pool says)."""
        return self.handle is not None and self.handle.pool.forked

    def _same_process(self) -> None:
        if self.forked:
            raise TxnCallError(
                TxnCallError.NOT_OWNER, 0,
                f"transactional id {self.transactional_id!r} belongs to the producer of process "
                f"{self.pid}: a forked child makes its own transactional producer",
            )  # fmt: skip

    def _no_conflict(self, command: int) -> None:
        """Another call is still open (timed out, to be resumed): this one conflicts."""
        open_call = self._open
        if open_call is not None and open_call.command != command:
            raise TxnCallError(
                TxnCallError.CONFLICT, 0,
                f"Conflicting {API_NAMES[open_call.command]} API call is already in progress",
            )  # fmt: skip

    def _owned(self, target: str = IN_TRANSACTION) -> None:
        self._same_process()
        if self.generation == 0:  # (kafka-python's words: no transition from UNINITIALIZED)
            raise TxnCallError(board.STATE, 0, self._transition(target))

    def _transition(self, target: str) -> str:
        return (f"TransactionalId {self.transactional_id}: Invalid transition attempted from "
                f"state {self.state} to state {target}")  # fmt: skip

    def _open_of(self, command: int) -> _Open | None:
        return self._open if self._open is not None and self._open.command == command else None

    def _call(self, command: int, payload: Any, timeout_s: float | None) -> Answer:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if self.handle is None:  # (no cluster: nothing can answer)
            self._open = self._open or _Open(command, 0)
            while True:
                self._check_deadline(deadline, "no bootstrap.servers: nothing to ask")
                time.sleep(0.01)
        self.handle.start()  # (its thread checks on the Sender while we wait)
        open_call = self._open
        if open_call is None:
            open_call = self._open = _Open(command, self._post(command, payload, deadline))
            if command == board.COMMIT:
                faultpoints.reached("txn.commit_posted")
        answer = self._wait(open_call.number, deadline)
        self._open = None
        if not answer.ok:
            raise TxnCallError(answer.action, answer.code, answer.text)
        return answer

    def _post(self, command: int, payload: Any, deadline: float | None) -> int:
        assert self.board is not None and self.handle is not None
        if self._unread:
            unread, self._unread = self._unread, 0
            answer = self._wait(unread, deadline)
            if not answer.ok:  # (the BEGIN the Sender refused: this call fails with it)
                raise TxnCallError(answer.action, answer.code, answer.text)
        with self.board.lock():
            delay = SENDER_ROUND_S
            while not self.board.free():  # (another producer's call, still being answered)
                self._check_deadline(deadline, "waiting for another producer's call to end")
                time.sleep(delay)
                delay = min(delay * 2, MAX_WAIT_S)
            if command == board.INIT:
                self.generation = max(self.board.newest_generation(),
                                      self.board.owner_generation()) + 1  # fmt: skip
            pool = self.handle.pool
            number = self.board.post(command, self.generation, (self.pid, pool.started), payload,
                                     pool.slot)  # fmt: skip
        self.handle.wake_sender()
        return number

    def _wait(self, number: int, deadline: float | None) -> Answer:
        """The answer; the Sender wakes our slot when it writes one, and our completion
        thread wakes us (the bounded wait covers a wake lost to a Sender's death)."""
        assert self.board is not None and self.handle is not None
        cond = self.handle._cond
        with cond:
            self.handle.answer_waiters += 1
            try:
                while (answer := self.board.answer_of(number)) is None:
                    self._check_deadline(deadline, "Timed out waiting for the transaction "
                                         "coordinator")  # fmt: skip
                    cond.wait(MAX_WAIT_S)
            finally:
                self.handle.answer_waiters -= 1
        return answer

    @staticmethod
    def _check_deadline(deadline: float | None, what: str) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise TxnCallError(TxnCallError.TIMEOUT, 0, what)
