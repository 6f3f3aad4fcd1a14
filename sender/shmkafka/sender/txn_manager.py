"""One transactional id's state, and the coordinator requests it needs next (the Java
client's TransactionManager, sans-IO: the Sender asks ``next_request(now_ms, ...)``, sends it
to the node the request names, and hands the answer to ``handle``).

States (Java's): UNINITIALIZED → INITIALIZING → READY → IN_TRANSACTION → COMMITTING or
ABORTING → READY; ABORTABLE_ERROR (only ``abort`` leaves it) and FATAL_ERROR (nothing does).

Rules:
- One coordinator request is in flight at a time; after a RETRY answer none is sent before
  the backoff ends. A lookup (FindCoordinator) goes first, then InitProducerId, then the
  partitions to add, then the offsets (AddOffsetsToTxn, then TxnOffsetCommit to the group's
  coordinator), then EndTxn.
- A partition's batches may be sent only once AddPartitionsToTxn has added it
  (``send_allowed``); EndTxn(commit) is sent only once every batch of the transaction is
  acknowledged (``unacked_batches`` 0) and every add is done; EndTxn(abort) once no batch is
  in flight.
- A transaction that added nothing ends without EndTxn.
- Errors are sorted by protocol/txn_errors.py: an abortable one moves the transaction to
  ABORTABLE_ERROR, a fenced or fatal one the producer to FATAL_ERROR; ``error`` keeps it for
  the application's next call.
- Calls that the state does not allow raise TxnStateError, changing nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from shmkafka.protocol.messages.find_coordinator import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from shmkafka.protocol.messages.transactions import (
    AddPartitionsToTxnTopic,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from shmkafka.protocol.schema import Message
from shmkafka.protocol.txn_errors import PRODUCE, TxnAction, classify

TopicPartition = tuple[str, int]


class State(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING_TRANSACTION"
    ABORTING = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class Target(enum.Enum):
    ANY_NODE = "any"
    TXN_COORDINATOR = "transaction coordinator"
    GROUP_COORDINATOR = "group coordinator"


class TxnStateError(Exception):
    """A call the transaction's state does not allow (kafka-python's IllegalStateError,
    confluent-kafka's _STATE)."""


@dataclass(frozen=True)
class TxnFailure:
    """The error that ended the transaction (abortable) or the producer (fatal)."""

    action: TxnAction
    api_key: int
    error_code: int
    text: str = ""  # why, when no broker error says it (a local failure)

    def __str__(self) -> str:
        if self.text:
            return self.text
        known = self.error_code in ErrorCode._value2member_map_
        name = ErrorCode(self.error_code).name if known else "?"
        return f"{name} ({self.error_code}) answering api key {self.api_key}: {self.action.value}"


@dataclass(frozen=True)
class TxnRequest:
    """A request to send, and where: ``node`` for the coordinators (None: any node)."""

    target: Target
    node: int | None
    message: Message


@dataclass(frozen=True)
class PendingOffsets:
    group_id: str
    offsets: dict[TopicPartition, tuple[int, str | None]]  # (offset, metadata)
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    leader_epochs: dict[TopicPartition, int] = field(default_factory=dict)  # (-1: none)


@dataclass
class _Lookup:
    key_type: int
    key: str


@dataclass
class TransactionManager:
    transactional_id: str
    transaction_timeout_ms: int = 60_000
    retry_backoff_ms: int = 100
    state: State = State.UNINITIALIZED
    producer_id: int = -1
    producer_epoch: int = -1
    coordinator: int | None = None
    error: TxnFailure | None = None
    completed: list[bool] = field(default_factory=list)  # each EndTxn's outcome: committed?
    _group_coordinators: dict[str, int] = field(default_factory=dict)
    _lookups: list[_Lookup] = field(default_factory=list)
    _pending_partitions: set[TopicPartition] = field(default_factory=set)
    _adding: frozenset[TopicPartition] = frozenset()
    _added: set[TopicPartition] = field(default_factory=set)
    _offsets: PendingOffsets | None = None
    _offsets_added: bool = False  # AddOffsetsToTxn done: TxnOffsetCommit next
    _started: bool = False  # something was added: EndTxn is needed
    _in_flight: TxnRequest | None = None
    _backoff_until_ms: int = 0

    # ------------------------------------------------------------------ the app's calls

    def init_transactions(self) -> None:
        self._require(State.UNINITIALIZED)
        self.state = State.INITIALIZING
        self._look_up(KEY_TYPE_TRANSACTION, self.transactional_id)

    def begin(self) -> None:
        self._require(State.READY)
        self.state = State.IN_TRANSACTION

    def add_partition(self, topic: str, partition: int) -> None:
        """A batch of this partition is about to be sent in the transaction (also while it
        commits: records sent just before ``commit`` are still queued)."""
        self._require(State.IN_TRANSACTION, State.COMMITTING)
        tp = (topic, partition)
        if tp not in self._added and tp not in self._adding:
            self._pending_partitions.add(tp)

    def send_offsets(self, offsets: PendingOffsets) -> None:
        self._require(State.IN_TRANSACTION)
        if self._offsets is not None:
            raise TxnStateError("the offsets of a previous call are still being sent")
        self._offsets, self._offsets_added = offsets, False

    def commit(self) -> None:
        if self.state is State.ABORTABLE_ERROR:
            raise TxnStateError(f"cannot commit: the transaction must be aborted ({self.error})")
        self._require(State.IN_TRANSACTION)
        self.state = State.COMMITTING

    def abort(self) -> None:
        self._require(State.IN_TRANSACTION, State.ABORTABLE_ERROR)
        self.state = State.ABORTING
        self._pending_partitions.clear()
        self._offsets = None

    # ------------------------------------------------------------------ the Sender's

    def send_allowed(self, topic: str, partition: int) -> bool:
        committing = self.state in (State.IN_TRANSACTION, State.COMMITTING)
        return committing and (topic, partition) in self._added

    def next_request(
        self, now_ms: int, unacked_batches: int,
        node_ready: Callable[[int | None], bool] | None = None,
    ) -> TxnRequest | None:  # fmt: skip
        """The next coordinator request to send now, if any (and records it in flight).
        ``node_ready(node)``: can a request go to that node now (None: any node)? If not,
        nothing is asked yet."""
        if self._in_flight is not None or now_ms < self._backoff_until_ms:
            return None
        request = self._next(unacked_batches)
        if request is not None and node_ready is not None and not node_ready(request.node):
            self._adding = frozenset()  # (asked when the node is ready)
            return None
        ending = self.state in (State.COMMITTING, State.ABORTING)
        if request is None and ending and not self._started and unacked_batches == 0:
            self._finish_locally()  # (nothing was added: no EndTxn)
        self._in_flight = request
        return request

    def handle(self, request: TxnRequest, response: Message | None, now_ms: int) -> None:
        """The answer to ``request`` (None: the connection failed before one came)."""
        assert request is self._in_flight, "an answer to a request not in flight"
        self._in_flight = None
        if response is None:  # (a lost connection: the coordinator may have moved)
            self._moved(request)
            return
        if isinstance(response, FindCoordinatorResponse):
            self._found(request, response, now_ms)
        elif isinstance(response, InitProducerIdResponse):
            self._initialized(request, response, now_ms)
        elif isinstance(response, AddPartitionsToTxnResponse):
            self._partitions_added(request, response, now_ms)
        elif isinstance(response, AddOffsetsToTxnResponse):
            if self._ok(request, response.error_code, now_ms):
                self._offsets_added = True
                self._started = True
        elif isinstance(response, TxnOffsetCommitResponse):
            self._offsets_committed(request, response, now_ms)
        elif isinstance(response, EndTxnResponse) and self._ok(
            request, response.error_code, now_ms
        ):
            self._finish_locally()

    def batch_failed(self, error_code: int, text: str = "") -> None:
        """A batch of the transaction failed for good (after the Sender's retries); a local
        failure (a negative code: delivery.timeout.ms passed) makes it abortable."""
        action = TxnAction.ABORTABLE if error_code < 0 else classify(PRODUCE, error_code)
        self._fail(action, PRODUCE, error_code, text)

    @property
    def request_in_flight(self) -> bool:
        return self._in_flight is not None

    @property
    def offsets_pending(self) -> bool:
        return self._offsets is not None

    @property
    def started(self) -> bool:
        return self._started

    @classmethod
    def resume(
        cls, transactional_id: str, state: State, producer_id: int, epoch: int, started: bool,
        transaction_timeout_ms: int = 60_000, retry_backoff_ms: int = 100,
    ) -> TransactionManager:  # fmt: skip
        """A restarted Sender's: the state its predecessor left in the pool. An open
        transaction cannot commit any more (what was added is not known): it is abortable.
        A commit or an abort goes on; the coordinator is looked up again."""
        tm = cls(transactional_id, transaction_timeout_ms, retry_backoff_ms)
        tm.producer_id, tm.producer_epoch, tm._started = producer_id, epoch, started
        if state in (State.UNINITIALIZED, State.INITIALIZING):
            return tm
        tm.state = state
        if state is State.IN_TRANSACTION:
            tm.state = State.ABORTABLE_ERROR
            tm.error = TxnFailure(
                TxnAction.ABORTABLE, -1, -1,
                "the pool's Sender restarted during the transaction: it must be aborted",
            )  # fmt: skip
        elif state in (State.ABORTABLE_ERROR, State.FATAL_ERROR):
            tm.error = TxnFailure(
                TxnAction.ABORTABLE if state is State.ABORTABLE_ERROR else TxnAction.FATAL,
                -1, -1, f"the transaction was in {state.value} when the Sender restarted",
            )  # fmt: skip
        tm._look_up(KEY_TYPE_TRANSACTION, transactional_id)
        return tm

    # ------------------------------------------------------------------ inside

    def _require(self, *allowed: State) -> None:
        if self.state is State.FATAL_ERROR:
            raise TxnStateError(f"the producer failed: {self.error}")
        if self.state not in allowed:
            names = " or ".join(s.value for s in allowed)
            raise TxnStateError(f"transaction state is {self.state.value}, not {names}")

    def _look_up(self, key_type: int, key: str) -> None:
        if not any(lk.key_type == key_type and lk.key == key for lk in self._lookups):
            self._lookups.append(_Lookup(key_type, key))

    def _next(self, unacked_batches: int) -> TxnRequest | None:
        if self._lookups:
            lookup = self._lookups[0]
            return TxnRequest(Target.ANY_NODE, None, FindCoordinatorRequest(
                key=lookup.key, key_type=lookup.key_type, coordinator_keys=(lookup.key,)
            ))  # fmt: skip
        if self.state is State.INITIALIZING:
            return self._to_coordinator(InitProducerIdRequest(
                self.transactional_id, self.transaction_timeout_ms
            ))  # fmt: skip
        if self.state not in (State.IN_TRANSACTION, State.COMMITTING, State.ABORTING):
            return None
        if self._pending_partitions:
            self._adding = frozenset(self._pending_partitions)
            return self._to_coordinator(self._add_partitions_request())
        if self._offsets is not None:
            return self._offsets_request()
        if self.state is State.COMMITTING and unacked_batches == 0 and self._started:
            return self._to_coordinator(self._end_request(True))
        if self.state is State.ABORTING and unacked_batches == 0 and self._started:
            return self._to_coordinator(self._end_request(False))
        return None

    def _to_coordinator(self, message: Message) -> TxnRequest:
        return TxnRequest(Target.TXN_COORDINATOR, self.coordinator, message)

    def _add_partitions_request(self) -> AddPartitionsToTxnRequest:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self._adding):
            by_topic.setdefault(topic, []).append(partition)
        topics = tuple(AddPartitionsToTxnTopic(t, tuple(ps)) for t, ps in by_topic.items())
        return AddPartitionsToTxnRequest(
            self.transactional_id, self.producer_id, self.producer_epoch, topics
        )

    def _offsets_request(self) -> TxnRequest | None:
        offsets = self._offsets
        assert offsets is not None
        if not self._offsets_added:
            return self._to_coordinator(AddOffsetsToTxnRequest(
                self.transactional_id, self.producer_id, self.producer_epoch, offsets.group_id
            ))  # fmt: skip
        node = self._group_coordinators.get(offsets.group_id)
        if node is None:
            self._look_up(KEY_TYPE_GROUP, offsets.group_id)
            return self._next(1)  # (the lookup, now first)
        by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for (topic, partition), (offset, metadata) in sorted(offsets.offsets.items()):
            by_topic.setdefault(topic, []).append(
                TxnOffsetCommitRequestPartition(
                    partition, offset, offsets.leader_epochs.get((topic, partition), -1), metadata
                )
            )
        topics = tuple(TxnOffsetCommitRequestTopic(t, tuple(ps)) for t, ps in by_topic.items())
        return TxnRequest(Target.GROUP_COORDINATOR, node, TxnOffsetCommitRequest(
            self.transactional_id, offsets.group_id, self.producer_id, self.producer_epoch,
            offsets.generation_id, offsets.member_id, offsets.group_instance_id, topics,
        ))  # fmt: skip

    def _end_request(self, commit: bool) -> EndTxnRequest:
        return EndTxnRequest(self.transactional_id, self.producer_id, self.producer_epoch, commit)

    def _finish_locally(self) -> None:
        self.completed.append(self.state is State.COMMITTING)
        self.state = State.READY
        self._added.clear()
        self._adding = frozenset()
        self._offsets, self._started, self.error = None, False, None

    def _ok(self, request: TxnRequest, code: int, now_ms: int) -> bool:
        """True for NONE; otherwise acts on the error and returns False."""
        if code == ErrorCode.NONE:
            return True
        action = classify(request.message.API_KEY, code)
        if action is TxnAction.RETRY:
            self._backoff_until_ms = now_ms + self.retry_backoff_ms
        elif action is TxnAction.FIND_COORDINATOR:
            self._moved(request)
            self._backoff_until_ms = now_ms + self.retry_backoff_ms
        else:
            self._fail(action, request.message.API_KEY, code)
        return False

    def _fail(self, action: TxnAction, api_key: int, code: int, text: str = "") -> None:
        if self.state is State.FATAL_ERROR:
            return
        failure = TxnFailure(action, api_key, code, text)
        if action.is_fatal:
            self.state, self.error = State.FATAL_ERROR, failure
        elif action is TxnAction.ABORTABLE and self.state is not State.ABORTING:
            self.state, self.error = State.ABORTABLE_ERROR, failure
            self._pending_partitions.clear()
            self._offsets = None

    def _moved(self, request: TxnRequest) -> None:
        if request.target is Target.GROUP_COORDINATOR and self._offsets is not None:
            self._group_coordinators.pop(self._offsets.group_id, None)
            self._look_up(KEY_TYPE_GROUP, self._offsets.group_id)
        elif request.target is Target.ANY_NODE:
            return  # (the lookup stays first: it is asked again)
        else:
            self.coordinator = None
            self._look_up(KEY_TYPE_TRANSACTION, self.transactional_id)
        if isinstance(request.message, AddPartitionsToTxnRequest):
            self._adding = frozenset()  # (asked again with the ones still pending)

    def _found(self, request: TxnRequest, response: FindCoordinatorResponse, now_ms: int) -> None:
        lookup = self._lookups[0]
        answer = response.coordinator_for(lookup.key)
        if not self._ok(request, answer.error_code, now_ms):
            return
        self._lookups.pop(0)
        if lookup.key_type == KEY_TYPE_TRANSACTION:
            self.coordinator = answer.node_id
        else:
            self._group_coordinators[lookup.key] = answer.node_id

    def _initialized(self, request: TxnRequest, response: InitProducerIdResponse,
                     now_ms: int) -> None:  # fmt: skip
        if self._ok(request, response.error_code, now_ms):
            self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
            self.state = State.READY

    def _partitions_added(self, request: TxnRequest, response: AddPartitionsToTxnResponse,
                          now_ms: int) -> None:  # fmt: skip
        codes = {
            (t.name, p.partition_index): p.partition_error_code
            for t in response.results for p in t.results_by_partition
        }  # fmt: skip
        failed = [c for c in codes.values() if c != ErrorCode.NONE]
        # the partitions' real errors first: OPERATION_NOT_ATTEMPTED only says another failed
        failed.sort(key=lambda c: c == ErrorCode.OPERATION_NOT_ATTEMPTED)
        adding, self._adding = self._adding, frozenset()
        if failed and not self._ok(request, failed[0], now_ms):
            return
        self._added |= adding
        self._pending_partitions -= adding
        self._started = self._started or bool(adding)

    def _offsets_committed(self, request: TxnRequest, response: TxnOffsetCommitResponse,
                           now_ms: int) -> None:  # fmt: skip
        failed = [p.error_code for t in response.topics for p in t.partitions if p.error_code]
        if failed and not self._ok(request, failed[0], now_ms):
            return
        self._offsets = None
