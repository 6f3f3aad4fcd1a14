"""How a transactional producer treats each broker error of each API, sorted as the Java
client's TransactionManager sorts them (sans-IO: an API key and an error code in, what to do
out).

- ``RETRY``: send the same request again after the backoff (a coordinator loading, a
  transaction's markers still being written, a topic not known yet).
- ``FIND_COORDINATOR``: the coordinator moved or is unknown: look it up again, then retry.
- ``ABORTABLE``: this transaction cannot commit; the application must abort it, and then
  the producer goes on (an unauthorized topic or group, a producer id the broker lost, a
  group member the group no longer knows).
- ``FENCED``: another producer took this transactional id (a newer epoch): fatal.
- ``FATAL``: the producer can do nothing more (an unauthorized transactional id, a
  transaction state the coordinator refuses, any error not expected from the API).

Rules:
- Every API of a transaction is in ``TABLE``; an error code it does not list is FATAL, as
  Java's "unexpected error" is. NONE is never classified (nothing to do).
- The data path (Produce) is classified once a batch has finally failed (after the Sender's
  own retries): fencing and an unauthorized cluster are fatal, anything else makes the
  transaction abortable (a lost sequence or producer id too, KIP-360), as Java's
  TransactionManager does with a failed batch.
"""

from __future__ import annotations

import enum

from shmkafka.protocol.error_codes import ErrorCode as E


class TxnAction(enum.Enum):
    RETRY = "retry"
    FIND_COORDINATOR = "find_coordinator"
    ABORTABLE = "abortable"
    FENCED = "fenced"
    FATAL = "fatal"

    @property
    def is_fatal(self) -> bool:
        return self in (TxnAction.FENCED, TxnAction.FATAL)


PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 10, 22
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28

_COORDINATOR_MOVED: dict[int, TxnAction] = {
    E.COORDINATOR_NOT_AVAILABLE: TxnAction.FIND_COORDINATOR,
    E.NOT_COORDINATOR: TxnAction.FIND_COORDINATOR,
}
_BUSY: dict[int, TxnAction] = {
    E.COORDINATOR_LOAD_IN_PROGRESS: TxnAction.RETRY,
    E.CONCURRENT_TRANSACTIONS: TxnAction.RETRY,
}
_FENCED: dict[int, TxnAction] = {
    E.PRODUCER_FENCED: TxnAction.FENCED,
    E.INVALID_PRODUCER_EPOCH: TxnAction.FENCED,
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: TxnAction.FATAL,
}
_LOST_PRODUCER: dict[int, TxnAction] = {
    E.UNKNOWN_PRODUCER_ID: TxnAction.ABORTABLE,
    E.INVALID_PRODUCER_ID_MAPPING: TxnAction.ABORTABLE,
    E.TRANSACTION_ABORTABLE: TxnAction.ABORTABLE,
}

TABLE: dict[int, dict[int, TxnAction]] = {
    FIND_COORDINATOR: {
        E.COORDINATOR_NOT_AVAILABLE: TxnAction.RETRY,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: TxnAction.FATAL,
        E.GROUP_AUTHORIZATION_FAILED: TxnAction.ABORTABLE,
    },
    INIT_PRODUCER_ID: {**_COORDINATOR_MOVED, **_BUSY, **_FENCED},
    ADD_PARTITIONS_TO_TXN: {
        **_COORDINATOR_MOVED,
        **_BUSY,
        **_FENCED,
        **_LOST_PRODUCER,
        E.UNKNOWN_TOPIC_OR_PARTITION: TxnAction.RETRY,
        E.TOPIC_AUTHORIZATION_FAILED: TxnAction.ABORTABLE,
        E.OPERATION_NOT_ATTEMPTED: TxnAction.ABORTABLE,  # (another partition's error)
        E.INVALID_TXN_STATE: TxnAction.FATAL,
    },
    ADD_OFFSETS_TO_TXN: {
        **_COORDINATOR_MOVED,
        **_BUSY,
        **_FENCED,
        **_LOST_PRODUCER,
        E.GROUP_AUTHORIZATION_FAILED: TxnAction.ABORTABLE,
        E.INVALID_TXN_STATE: TxnAction.FATAL,
    },
    TXN_OFFSET_COMMIT: {  # (sent to the group's coordinator)
        **_COORDINATOR_MOVED,
        **_FENCED,
        **_LOST_PRODUCER,
        E.REQUEST_TIMED_OUT: TxnAction.FIND_COORDINATOR,
        E.COORDINATOR_LOAD_IN_PROGRESS: TxnAction.RETRY,
        E.UNKNOWN_TOPIC_OR_PARTITION: TxnAction.RETRY,
        E.GROUP_AUTHORIZATION_FAILED: TxnAction.ABORTABLE,
        E.UNKNOWN_MEMBER_ID: TxnAction.ABORTABLE,  # (the consumer left the group: commit failed)
        E.ILLEGAL_GENERATION: TxnAction.ABORTABLE,
        E.FENCED_INSTANCE_ID: TxnAction.ABORTABLE,
        E.UNSUPPORTED_FOR_MESSAGE_FORMAT: TxnAction.FATAL,
    },
    END_TXN: {
        **_COORDINATOR_MOVED,
        **_BUSY,
        **_FENCED,
        **_LOST_PRODUCER,
        E.INVALID_TXN_STATE: TxnAction.FATAL,
    },
    PRODUCE: {  # (a transactional producer's batches)
        **_FENCED,
        **_LOST_PRODUCER,
        E.OUT_OF_ORDER_SEQUENCE_NUMBER: TxnAction.ABORTABLE,
        E.TOPIC_AUTHORIZATION_FAILED: TxnAction.ABORTABLE,
        E.CLUSTER_AUTHORIZATION_FAILED: TxnAction.FATAL,
        E.INVALID_TXN_STATE: TxnAction.FATAL,
    },
}


def classify(api_key: int, error_code: int) -> TxnAction:
    """What a transactional producer does with ``error_code`` in a response to
    ``api_key``'s request (FATAL for what the API does not expect)."""
    if error_code == E.NONE:
        raise ValueError("NONE is not an error")
    unexpected = TxnAction.ABORTABLE if api_key == PRODUCE else TxnAction.FATAL
    return TABLE[api_key].get(error_code, unexpected)
