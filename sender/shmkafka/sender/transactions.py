"""The Sender's side of a transactional pool, which serves one transactional id: the
board's commands into the TransactionManager, its coordinator requests onto the network, the
gate on drain, and what happens when a process dies.

Rules:
- Commands are taken one at a time, in the order posted. A command from a generation older
  than the owner's is answered FENCED without touching the transaction.
- INIT discards what an earlier owner left. Its queued batches fail with PRODUCER_FENCED
  and its in-flight ones are awaited. Then sequences restart and InitProducerId runs again:
  the coordinator ends the old transaction and bumps the epoch.
- A partition's batches are drained only once AddPartitionsToTxn has added it. COMMIT drains
  everything queued without lingering, and EndTxn waits for every ack. ABORT fails what is
  queued (TXN_ABORTED), awaits what is in flight, then sends EndTxn(abort).
- A batch that fails for good makes the transaction abortable, or the producer fatal. If it
  had a sequence, its partition's sequences now have a gap, so the abort that follows ends
  with a new epoch (InitProducerId) and sequences from 0.
- The owner dead (kill -9): an open transaction is aborted at once; a commit or an abort it
  had asked for is finished.
- A fatal error (fenced): every queued batch fails with it; nothing can send them now.
- A Sender started on a pool with an open transaction marks it ABORTABLE_ERROR. One that
  finds a commit or an abort under way finishes it: the partitions of the batches still
  queued are added again, which the coordinator accepts within the same transaction. A
  call its predecessor took and did not answer is answered from the state it left (a
  COMMIT that reached READY committed) or applied again (a BEGIN or an ABORT it may not
  have applied). It sends InitProducerId only for an INIT or after a sequence gap.
- No command is taken while a new epoch is under way; what INIT answers, no batch of the
  fenced owner is left queued (failed when the INIT is taken and again when answered).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import APIS, EndTxnRequest
from shmkafka.protocol.txn_errors import TxnAction
from shmkafka.sender.connection import ClientResponse, Network
from shmkafka.sender.idempotence import Idempotence, reset_sequences
from shmkafka.sender.metadata import Metadata
from shmkafka.sender.txn_manager import (
    PendingOffsets,
    State,
    TransactionManager,
    TxnRequest,
    TxnStateError,
)
from shmkafka.shm import faultpoints
from shmkafka.shm import txn_board as board
from shmkafka.shm.procs import is_alive
from shmkafka.shm.rings import TXN_ABORTED
from shmkafka.shm.txn_board import Command


class Host(Protocol):
    """What the transactions ask of the Sender that runs them (sender.py's ``Sender``)."""

    pool: SharedPool
    config: SenderConfig
    accumulator: RecordAccumulator
    network: Network
    metadata: Metadata
    idempotence: Idempotence

    def any_node(self, now_ms: int) -> int | None:
        """A broker ready for a request, or None."""

    def finish(
        self, batch: DrainedBatch, base_offset: int, code: int, append: int, start: int
    ) -> None:
        """The batch's result posted, and its memory given back."""


log = logging.getLogger("shmkafka.sender")

OWNER_CHECK_MS = 500  # how often the owner's liveness is checked while a transaction is open

STATE_CODES = {
    State.UNINITIALIZED: board.UNINITIALIZED, State.INITIALIZING: board.INITIALIZING,
    State.READY: board.READY, State.IN_TRANSACTION: board.IN_TRANSACTION,
    State.COMMITTING: board.COMMITTING, State.ABORTING: board.ABORTING,
    State.ABORTABLE_ERROR: board.ABORTABLE_ERROR, State.FATAL_ERROR: board.FATAL_ERROR,
}  # fmt: skip
STATES = {code: state for state, code in STATE_CODES.items()}
ACTIONS = {
    TxnAction.RETRY: board.RETRIABLE, TxnAction.FIND_COORDINATOR: board.RETRIABLE,
    TxnAction.ABORTABLE: board.ABORTABLE, TxnAction.FENCED: board.FENCED,
    TxnAction.FATAL: board.FATAL,
}  # fmt: skip
OPEN_STATES = (State.IN_TRANSACTION, State.ABORTABLE_ERROR)


class Transactions:
    def __init__(self, sender: Host) -> None:
        self.sender = sender
        self.pool = sender.pool
        self.board = sender.pool.txn
        config = sender.config
        assert config.transactional_id is not None
        self.transactional_id = config.transactional_id
        self._timeouts = (config.transaction_timeout_ms, config.retry_backoff_ms)
        self._open: Command | None = None  # the command taken and not answered yet
        self._resetting = False  # INIT or a gap: waiting for in-flight batches, then a new epoch
        self._gap = False  # a batch with a sequence failed: the next abort bumps the epoch
        self._failing = False  # failing batches ourselves: not the transaction's failure
        self._next_owner_check = 0
        self._reapply = False
        self.tm = self._restore()

    def _restore(self) -> TransactionManager:
        state = STATES.get(self.board.state(), State.UNINITIALIZED)
        producer_id, epoch = self.pool.producer_identity()
        tm = TransactionManager.resume(
            self.transactional_id, state, producer_id, epoch, self.board.started(),
            *self._timeouts,
        )  # fmt: skip
        if state is not State.UNINITIALIZED:
            log.info("transaction state %s found at start: now %s", state.value, tm.state.value)
        if self.board.taken() > self.board.answered():  # a call a dead Sender had taken
            self._open = self.board.taken_command()
            kind = self._open.command
            if kind == board.INIT:
                self._resetting = True
            elif kind == board.COMMIT and state is State.READY:
                tm.completed.append(True)  # (COMMITTING reaches READY only by committing)
            elif (kind == board.ABORT and tm.state in OPEN_STATES) or (
                kind == board.BEGIN and tm.state is State.READY
            ):
                self._reapply = True  # (taken, not applied yet: applied at the first poll)
        return tm

    # ------------------------------------------------------------------ the Sender's calls

    def producer_ready(self) -> bool:
        """May batches be sent: a producer id, and no new epoch under way."""
        return (
            not self._resetting
            and self.tm.producer_id >= 0
            and self.tm.state not in (State.UNINITIALIZED, State.INITIALIZING)
        )

    def can_drain(self, topic: str, partition: int) -> bool:
        tm = self.tm
        if tm.state not in (State.IN_TRANSACTION, State.COMMITTING):
            return False
        tm.add_partition(topic, partition)
        return tm.send_allowed(topic, partition)

    def flushing(self) -> bool:
        return self.tm.state is State.COMMITTING

    def busy(self) -> bool:
        """Work left: a call to answer, or a transaction not ended (an open one too: if its
        owner died, it is aborted before the Sender may exit)."""
        return (
            self._open is not None
            or self._resetting
            or self.tm.state in (State.INITIALIZING, State.COMMITTING, State.ABORTING)
            or self.tm.state in OPEN_STATES
        )

    def batch_failed(self, batch: DrainedBatch, code: int) -> None:
        """A batch failed for good (after retries, or at delivery.timeout.ms)."""
        if batch.info.base_sequence >= 0:
            self._gap = True
        if not self._failing and self.tm.state in (State.IN_TRANSACTION, State.COMMITTING):
            self.tm.batch_failed(code)
            log.warning("transaction failed: %s", self.tm.error)

    def sequences_lost(self) -> None:
        """The pool forgot retired topics' sequences: a new epoch once no transaction is
        open (sequences restart at 0 only with a new epoch)."""
        self._gap = True

    def poll(self, now_ms: int) -> None:
        """Once a round, before ready: take a command, send the coordinator what it needs,
        answer what is done."""
        self._check_owner(now_ms)
        if self._reapply and self._open is not None:
            self._reapply = False
            self._apply(self._open, now_ms)
        if (self._open is None and not self._resetting
                and (command := self.board.next_command()) is not None):  # fmt: skip
            self.board.take(command)
            self._open = command
            self._apply(command, now_ms)
        # (before any request goes out: a Sender killed after it resumes from this state)
        self._publish()
        self._progress(now_ms)
        state = self.tm.state
        if state is State.FATAL_ERROR:  # (nothing queued can ever be sent now)
            code = self._error_code()
            self._fail_queued(code if code > 0 else TXN_ABORTED, now_ms)
        elif state is State.ABORTING:  # (a batch queued again meanwhile: Java's abortUndrained)
            self._fail_queued(TXN_ABORTED, now_ms)
        elif state is State.READY and self._gap and not self._resetting:
            self._gap = False  # (a gap in the sequences: a new epoch before the next one)
            self._resetting = True
        self._publish()
        if self._open is not None:
            self._maybe_answer(self._open, now_ms)

    def _publish(self) -> None:
        self.board.publish_state(STATE_CODES[self.tm.state], self.tm.started)

    def send_requests(self, now_ms: int) -> None:
        """After ready: AddPartitionsToTxn for the partitions it found, in this round."""
        if not self._resetting:
            self._progress(now_ms)

    # ------------------------------------------------------------------ commands

    def _apply(self, command: Command, now_ms: int) -> None:
        if command.command != board.INIT and command.generation != self.board.owner_generation():
            fenced = "a newer producer with the same transactional id fenced this one"
            self._answer(board.FENCED, ErrorCode.PRODUCER_FENCED, fenced)
            return
        tm = self.tm
        try:
            if command.command == board.INIT:
                log.info("init_transactions (generation %d)", command.generation)
                self._fail_queued(ErrorCode.PRODUCER_FENCED, now_ms)
                self._resetting = True
            elif command.command == board.BEGIN:
                tm.begin()
                self._publish()  # (before the answer: a restarted Sender is IN_TRANSACTION)
                self._answer(board.OK)
            elif command.command == board.OFFSETS:
                tm.send_offsets(_offsets(command.payload))
            elif command.command == board.COMMIT:
                tm.commit()
            elif command.command == board.ABORT:
                tm.abort()
                self._fail_queued(TXN_ABORTED, now_ms)
        except TxnStateError as exc:
            action = board.FATAL if tm.state is State.FATAL_ERROR else board.STATE
            if tm.state is State.ABORTABLE_ERROR:
                action = board.ABORTABLE
            self._answer(action, self._error_code(), str(exc))

    def _maybe_answer(self, command: Command, now_ms: int) -> None:
        tm = self.tm
        if self._resetting or tm.state in (State.INITIALIZING, State.COMMITTING, State.ABORTING):
            return  # (still under way)
        if tm.state is State.FATAL_ERROR:
            failure = tm.error
            action = ACTIONS[failure.action] if failure else board.FATAL
            self._answer(action, self._error_code(), str(failure))
            return
        kind = command.command
        if kind == board.OFFSETS and tm.offsets_pending:
            return
        if tm.state is State.ABORTABLE_ERROR:
            self._answer(board.ABORTABLE, self._error_code(), str(tm.error))
        elif kind == board.COMMIT and not (tm.state is State.READY and tm.completed[-1:] == [True]):
            self._answer(board.STATE, 0, f"the transaction ended in state {tm.state.value}")
        else:
            if kind == board.INIT:  # (what a fenced owner appended after the INIT was taken)
                self._fail_queued(ErrorCode.PRODUCER_FENCED, now_ms)
            self._answer(board.OK)

    def _answer(self, action: int, code: int = 0, text: str = "") -> None:
        command, self._open = self._open, None
        assert command is not None
        self.board.answer(command.number, code, action, text)
        if command.poster_slot < self.pool.slots.high():  # (its completion thread wakes it)
            self.pool.rings.wake(command.poster_slot)

    def _error_code(self) -> int:
        return self.tm.error.error_code if self.tm.error is not None else 0

    # ------------------------------------------------------------------ the coordinator

    def _progress(self, now_ms: int) -> None:
        sender = self.sender
        in_flight = sum(sender.idempotence.in_flight.values())
        if self._resetting:
            if in_flight or self.tm.request_in_flight:
                return  # (a new epoch once nothing of the old one is in flight)
            self._new_epoch()
        tm = self.tm
        unacked = in_flight
        if tm.state in (State.COMMITTING, State.ABORTING):
            unacked += sum(s.queued for s in sender.accumulator.partition_states())
        request = tm.next_request(
            now_ms, unacked, lambda node: self._node(node, now_ms) is not None
        )
        if request is not None:
            node = self._node(request.node, now_ms)
            assert node is not None
            ending = isinstance(request.message, EndTxnRequest)
            if ending:
                faultpoints.reached("txn.before_end")
            api = APIS[request.message.API_KEY][1]
            sender.network.send(
                node, request.message, lambda r, t: self._on_response(tm, request, api, r, t),
                now_ms,
            )  # fmt: skip
            if ending:
                faultpoints.reached("txn.end_sent")

    def _new_epoch(self) -> None:
        """InitProducerId again: asked for (INIT), or after an abort that left a gap."""
        self._resetting = False
        coordinator = self.tm.coordinator
        reason = "a new epoch for the transactional id"
        reset_sequences(self.sender.accumulator, reason, logging.INFO)
        self.tm = TransactionManager(self.transactional_id, *self._timeouts)
        self.tm.coordinator = coordinator
        self.tm.init_transactions()
        if coordinator is not None:
            self.tm._lookups.clear()  # (the coordinator we know: asked again if it moved)

    def _node(self, node: int | None, now_ms: int) -> int | None:
        sender = self.sender
        if node is None:
            return sender.any_node(now_ms)
        if node not in sender.metadata.brokers:
            sender.metadata.request_update()
            return None
        return node if sender.network.ready(node, now_ms) else None

    def _on_response(
        self, tm: TransactionManager, request: TxnRequest, api: type, response: ClientResponse,
        now_ms: int,
    ) -> None:  # fmt: skip
        if tm is not self.tm:
            return  # (an answer to the manager a new epoch replaced)
        answer = response.response if isinstance(response.response, api) else None
        if answer is None:
            log.info("%s to %s failed: %s", type(request.message).__name__,
                     request.target.value, response.error)  # fmt: skip
        tm = self.tm
        before = tm.state
        tm.handle(request, answer, now_ms)
        if tm.producer_id >= 0 and self.pool.producer_identity() != (
            tm.producer_id,
            tm.producer_epoch,
        ):
            self.pool.set_producer_identity(tm.producer_id, tm.producer_epoch)
            log.info("transactional producer id %d epoch %d", tm.producer_id, tm.producer_epoch)
        if tm.state is not before and tm.state in (State.FATAL_ERROR, State.ABORTABLE_ERROR):
            log.warning("transaction: %s", tm.error)

    # ------------------------------------------------------------------ crashes

    def _check_owner(self, now_ms: int) -> None:
        if self.tm.state not in OPEN_STATES or now_ms < self._next_owner_check:
            return
        self._next_owner_check = now_ms + OWNER_CHECK_MS
        pid, started = self.board.owner()
        if is_alive(pid, started):
            return
        log.warning("the producer (pid %d) that owns transactional id %r died with its "
                    "transaction open: aborting it", pid, self.transactional_id)  # fmt: skip
        self.tm.abort()
        self._fail_queued(TXN_ABORTED, now_ms)

    def _fail_queued(self, code: int, now_ms: int) -> None:
        """Fail every queued batch (an abort, or a new owner): in-flight ones are awaited."""
        self._failing = True
        try:
            for batch in self.sender.accumulator.expire(now_ms, -1):
                if batch.info.base_sequence >= 0:
                    self._gap = True
                self.sender.finish(batch, -1, code, -1, -1)
        finally:
            self._failing = False


def _offsets(payload: dict[str, Any]) -> PendingOffsets:
    """The OFFSETS command's JSON: the group, and [[topic, partition, offset, metadata,
    leader epoch], ...] (-1: no leader epoch)."""
    rows = payload["offsets"]
    return PendingOffsets(
        str(payload["group_id"]),
        {(str(r[0]), int(r[1])): (int(r[2]), None if r[3] is None else str(r[3])) for r in rows},
        int(payload.get("generation_id", -1)),
        str(payload.get("member_id", "")),
        payload.get("group_instance_id"),
        {(str(r[0]), int(r[1])): int(r[4]) for r in rows if len(r) > 4 and r[4] is not None},
    )
