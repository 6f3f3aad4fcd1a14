"""aiokafka's transactional API on the pool (a mixin of AIOKafkaProducer): ``start`` makes
the producer the transactional id's owner (aiokafka gets its producer id there too), and
``begin_transaction``, ``commit_transaction``, ``abort_transaction``,
``send_offsets_to_transaction`` and the ``transaction()`` context go to the Sender through
the pool's transaction board, in the loop's executor (the loop never blocks).

Rules:
- aiokafka's errors: IllegalOperation without ``transactional_id`` or outside a
  transaction, AssertionError for a transition its state machine refuses, ProducerFenced
  when fenced, and the broker's error for an abortable or fatal one.
- ``transaction()`` commits; on an exception it aborts, unless the producer's error is
  fatal (fenced), and lets the exception out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from shmkafka.facades.aiokafka import types as aio_types
from shmkafka.facades.entry_switch import EntrySwitch
from shmkafka.producer.transactions import TransactionClient, TxnCallError
from shmkafka.protocol.broker_errors import for_code


def aiokafka_txn_error(exc: TxnCallError, state: str = "", target: str = "") -> BaseException:
    errors: Any = aio_types.errors()
    made: BaseException
    if exc.kind == TxnCallError.FENCED:
        made = errors.ProducerFenced()
    elif (
        exc.kind in (TxnCallError.ABORTABLE, TxnCallError.FATAL, TxnCallError.RETRIABLE)
        and exc.code > 0
    ):
        made = aio_types.aiokafka_error(for_code(exc.code)(exc.message))
    elif exc.kind == TxnCallError.STATE and target:
        made = AssertionError(
            f"Invalid state transition TransactionState.{state} -> TransactionState.{target}"
        )
    elif exc.kind == TxnCallError.TIMEOUT:
        made = errors.KafkaTimeoutError(exc.message)
    else:
        made = errors.KafkaError(exc.message)
    return made


class AIOTransactions(EntrySwitch):
    _txn: TransactionClient | None
    _loop: asyncio.AbstractEventLoop | None

    def _transactions(self) -> TransactionClient:
        if self._txn is None:
            raise aio_types.errors().IllegalOperation(
                "You need to configure transaction_id to use transactions"
            )
        return self._txn

    async def _in_executor(self, call: Callable[..., None], *args: Any, target: str = "") -> None:
        assert self._loop is not None
        txn = self._transactions()
        state = txn.state
        try:
            await self._loop.run_in_executor(None, call, *args)
        except TxnCallError as exc:
            raise aiokafka_txn_error(exc, state, target) from None

    async def begin_transaction(self) -> None:
        txn = self._transactions()
        await self._in_executor(txn.begin, target="IN_TRANSACTION")
        self._txn_fast(True)

    async def commit_transaction(self) -> None:
        txn = self._transactions()
        self._txn_fast(False)
        await self._in_executor(txn.commit, None, target="COMMITTING_TRANSACTION")

    async def abort_transaction(self) -> None:
        txn = self._transactions()
        self._txn_fast(False)
        await self._in_executor(txn.abort, None, target="ABORTING_TRANSACTION")

    def transaction(self) -> TransactionContext:
        """A transaction context: begins, then commits, or aborts on an exception."""
        return TransactionContext(self)

    async def send_offsets_to_transaction(self, offsets: Any, group_id: Any) -> None:
        txn = self._transactions()
        if txn.state != "IN_TRANSACTION":
            raise aio_types.errors().IllegalOperation("Not in the middle of a transaction")
        if not group_id or not isinstance(group_id, str):
            raise ValueError(group_id)
        await self._in_executor(txn.send_offsets, _payload(offsets, group_id), None)

    def _fatal(self) -> bool:
        return self._txn is not None and self._txn.in_fatal_error()

    def _check_transactional_send(self) -> None:
        if self._txn is None:
            return
        try:
            self._txn.check_send()
        except TxnCallError as exc:
            if exc.kind in (TxnCallError.STATE, TxnCallError.NOT_OWNER):
                raise aio_types.errors().IllegalOperation(
                    "Can't send messages while not in transaction"
                ) from None
            raise aiokafka_txn_error(exc) from None


class TransactionContext:
    def __init__(self, producer: AIOTransactions) -> None:
        self._producer = producer

    async def __aenter__(self) -> TransactionContext:
        await self._producer.begin_transaction()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:
            if self._producer._fatal():
                return  # (the exception goes out: nothing can be aborted)
            await self._producer.abort_transaction()
        else:
            await self._producer.commit_transaction()


def _payload(offsets: Any, group_id: str) -> dict[str, Any]:
    """aiokafka's offsets ({TopicPartition: offset | (offset, metadata)}) as board JSON."""
    if not offsets or not isinstance(offsets, dict):
        raise ValueError(offsets)
    rows = []
    for tp, value in offsets.items():
        if not all(hasattr(tp, a) for a in ("topic", "partition")):
            raise TypeError("Key should be TopicPartition instance")
        if isinstance(value, int):
            offset, metadata = value, ""
        else:
            try:
                offset, metadata = value
            except Exception as exc:
                raise ValueError(offsets) from exc
            if not isinstance(metadata, str):
                raise TypeError("Metadata should be a string")
        rows.append([tp.topic, tp.partition, offset, metadata])
    return {"group_id": group_id, "offsets": rows, "generation_id": -1, "member_id": "",
            "group_instance_id": None}  # fmt: skip
