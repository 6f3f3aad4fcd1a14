"""kafka-python's transactional methods on the pool (a mixin of KafkaProducer): the calls go
to the Sender through the pool's transaction board (producer/transactions.py), and come back
as kafka-python's errors.

Rules:
- A producer without ``transactional_id`` answers each call as kafka-python's does
  (IllegalStateError with its message).
- ``init_transactions`` waits up to ``max_block_ms`` (a KafkaTimeoutError; calling it again
  waits for the same initialization). The other calls wait for their answer, as
  kafka-python's do.
- Offsets and group metadata are checked before anything reaches the pool.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from shmkafka.facades.entry_switch import EntrySwitch
from shmkafka.pool.errors import IllegalStateError, KafkaTimeoutError
from shmkafka.producer.transactions import TransactionClient, TxnCallError
from shmkafka.protocol.broker_errors import for_code
from shmkafka.protocol.errors import KafkaError


def offsets_payload(offsets: Any, group: Any) -> dict[str, Any]:
    """``{TopicPartition: OffsetAndMetadata | int}`` and a ConsumerGroupMetadata or a group
    id, as the transaction board's JSON."""
    if isinstance(group, str):
        group_id, generation, member, instance = group, -1, "", None
    elif hasattr(group, "group_id"):
        group_id = group.group_id
        generation = getattr(group, "generation_id", -1)
        member = getattr(group, "member_id", "") or ""
        instance = getattr(group, "group_instance_id", None)
    else:
        raise TypeError(
            "send_offsets_to_transaction expects group_metadata to be a ConsumerGroupMetadata "
            f"or a group_id str, got {type(group)!r}"
        )
    if generation > 0 and not member:
        raise ValueError(f"Invalid ConsumerGroupMetadata: generation_id={generation} implies a "
                         "joined group but member_id is empty")  # fmt: skip
    if not isinstance(offsets, Mapping):
        raise TypeError(f"offsets must be a dict of TopicPartition to offsets, got {offsets!r}")
    rows = []
    for tp, value in offsets.items():
        offset = value if isinstance(value, int) else getattr(value, "offset", None)
        metadata = None if isinstance(value, int) else getattr(value, "metadata", None)
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"invalid offset {value!r} for {tp!r}")
        epoch = None if isinstance(value, int) else getattr(value, "leader_epoch", None)
        rows.append(
            [tp.topic, tp.partition, offset, metadata or "", -1 if epoch is None else epoch]
        )
    return {"group_id": group_id, "offsets": rows, "generation_id": generation,
            "member_id": member, "group_instance_id": instance}  # fmt: skip


def kafka_python_error(exc: TxnCallError, timeout_ms: int | None = None) -> KafkaError:
    """The error kafka-python raises for a transactional call's outcome."""
    if exc.kind == TxnCallError.TIMEOUT:
        return KafkaTimeoutError(
            f"Timeout expired while initializing transactional state in {timeout_ms} ms."
            if timeout_ms is not None else exc.message
        )  # fmt: skip
    if exc.kind == TxnCallError.FENCED:
        return for_code(90)(exc.message)  # ProducerFencedError
    if exc.kind == TxnCallError.NOT_OWNER:
        return IllegalStateError(exc.message)
    if exc.kind in (TxnCallError.ABORTABLE, TxnCallError.FATAL) and exc.code > 0:
        return for_code(exc.code)(exc.message)
    return KafkaError(exc.message)


@contextmanager
def _errors(timeout_ms: int | None = None) -> Iterator[None]:
    try:
        yield
    except TxnCallError as exc:
        raise kafka_python_error(exc, timeout_ms) from None


class KafkaTransactions(EntrySwitch):
    """init_transactions, begin_transaction, send_offsets_to_transaction, commit_transaction
    and abort_transaction, as kafka-python's KafkaProducer has them."""

    config: dict[str, Any]
    _txn: TransactionClient | None

    def _transactions(self, message: str) -> TransactionClient:
        if self._txn is None:
            raise IllegalStateError(message)
        return self._txn

    def init_transactions(self) -> None:
        txn = self._transactions(
            "Cannot call init_transactions without setting a transactional_id."
        )
        max_block_ms = self.config["max_block_ms"]
        with _errors(max_block_ms):
            txn.init(max_block_ms / 1000)

    def begin_transaction(self) -> None:
        txn = self._transactions("Cannot use transactional methods without enabling transactions")
        with _errors():
            txn.begin()
        self._txn_fast(True)

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any) -> None:
        txn = self._transactions("Cannot use transactional methods without enabling transactions")
        payload = offsets_payload(offsets, group_metadata)
        with _errors():
            txn.send_offsets(payload, None)

    def commit_transaction(self) -> None:
        txn = self._transactions("Cannot commit transaction since transactions are not enabled")
        self._txn_fast(False)
        with _errors():
            txn.commit(None)

    def abort_transaction(self) -> None:
        txn = self._transactions("Cannot abort transaction since transactions are not enabled.")
        self._txn_fast(False)
        with _errors():
            txn.abort(None)

    def _check_transactional_send(self) -> None:
        if self._txn is not None:
            try:
                self._txn.check_send()
            except TxnCallError as exc:
                if exc.kind == TxnCallError.STATE:
                    raise IllegalStateError(exc.message) from None
                raise kafka_python_error(exc) from None
