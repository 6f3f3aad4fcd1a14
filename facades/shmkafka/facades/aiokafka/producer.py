"""aiokafka's AIOKafkaProducer over the shared pool (``shmkafka.aiokafka``).

Rules:
- Nothing blocks the event loop. ``start``, ``flush`` and ``stop`` run the client's
  blocking parts in the loop's executor. A send waiting for its topic's metadata, or for
  room in a full pool, awaits (``asyncio.sleep``) and looks again; the pool itself never
  blocks it, since this producer's handle allocates with ``max_block_ms`` 0.
- Without ``max_batch_size`` the pool's batches grow with their load up to 1 MB, as
  KafkaProducer's do (``create_batch`` keeps aiokafka's 16,384 bytes); given, it bounds them.
- Results reach the loop in bulk. The process's completion thread hands each batch of done
  records to ``_deliver`` through one ``call_soon_threadsafe``, and that sets the asyncio
  futures on the loop. No future is touched from another thread.
- aiokafka's contract: keyword-only arguments with aiokafka 0.14's defaults (``acks=1``, no
  idempotence, ``request_timeout_ms`` 40000, ``create_batch`` of ``max_batch_size``), results as
  aiokafka's RecordMetadata (``None`` with ``acks=0``), aiokafka's errors (its own classes
  when it is installed, shmkafka.aiokafka.errors' otherwise), ``ProducerClosed`` after
  ``stop``. Better than aiokafka: ``stop`` is bounded by ``request_timeout_ms`` even with
  the broker down, records have a delivery timeout (``delivery_timeout_ms``), and records
  already in the pool outlive the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import warnings
import weakref
from collections.abc import Iterable
from typing import Any

from shmkafka.facades.aiokafka import types as aio_types
from shmkafka.facades.aiokafka.transactions import AIOTransactions, aiokafka_txn_error
from shmkafka.facades.kafka_python.producer import resolved_config, settings_for
from shmkafka.pool.errors import MemoryExhaustedError
from shmkafka.producer.callbacks import weakly
from shmkafka.producer.client import FULL_POOL_WAIT_S, Client
from shmkafka.producer.entry import PARTITION_MURMUR2, AppendEntry, EntryBinding
from shmkafka.producer.futures import Future
from shmkafka.producer.process_slot import awaiting_results
from shmkafka.producer.topics import check_topic
from shmkafka.producer.transactions import TransactionClient, TxnCallError
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.errors import KafkaError as ProtocolKafkaError
from shmkafka.protocol.records import record_size_bound

_MISSING = object()
AIOKAFKA_BATCH_BYTES = 16384  # aiokafka's max_batch_size: create_batch's bound
POOL_BATCH_BYTES = 1_000_000  # the pool's batches when max_batch_size is not given
# aiokafka arguments accepted and ignored: what they control does not exist here
IGNORED = ("loop", "api_version", "connections_max_idle_ms",
           "sasl_kerberos_service_name", "sasl_kerberos_domain_name")  # fmt: skip


def _check_arguments(
    loop: Any, api_version: Any, acks: Any, compression_type: str | None,
    enable_idempotence: bool,
) -> None:  # fmt: skip
    """aiokafka's checks of the constructor's arguments, in its order and words."""
    if loop is None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # (aiokafka's words)
            raise RuntimeError(
                "The object should be created within an async function or provide loop directly."
            ) from None
    else:
        warnings.warn(
            "The `loop` parameter has been deprecated since 0.7.1 "
            "and will be removed in a future release.",
            DeprecationWarning, stacklevel=3,
        )  # fmt: skip
    if api_version is not None:
        warnings.warn(
            "The `api_version` parameter has been deprecated since 0.13.0. "
            "It is now a no-op and will be removed in a future release. ",
            DeprecationWarning, stacklevel=3,
        )  # fmt: skip
    if acks not in (0, 1, -1, "all", _MISSING):
        raise ValueError("Invalid ACKS parameter")
    if compression_type not in ("gzip", "snappy", "lz4", "zstd", None):
        raise ValueError("Invalid compression type!")
    if enable_idempotence and acks not in ("all", -1, _MISSING):
        raise ValueError(f"acks={acks} not supported if enable_idempotence=True")


def _check_security(
    protocol: str, ssl_context: Any, mechanism: str, username: str | None,
    password: str | None,
) -> None:  # fmt: skip
    if protocol not in ("SSL", "PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError("`security_protocol` should be SSL or PLAINTEXT")
    if protocol in ("SSL", "SASL_SSL") and ssl_context is None:
        raise ValueError("`ssl_context` is mandatory if security_protocol=='SSL'")
    if protocol in ("SASL_SSL", "SASL_PLAINTEXT"):
        if mechanism not in ("PLAIN", "GSSAPI", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"):
            raise ValueError(
                "only `PLAIN`, `GSSAPI`, `SCRAM-SHA-256`, `SCRAM-SHA-512` and `OAUTHBEARER`"
                "sasl_mechanism are supported at the moment"
            )
        if mechanism == "PLAIN" and (username is None or password is None):
            raise ValueError("sasl_plain_username and sasl_plain_password required for PLAIN sasl")


def _tls_files(ssl_context: Any) -> dict[str, Any] | None:
    """The files an ``ssl_context`` was made from (the Sender, another process, opens
    them), or None without one."""
    tls: dict[str, Any] | None = getattr(ssl_context, "shmkafka_files", None)
    if ssl_context is not None and tls is None:
        raise aio_types.errors().KafkaConfigurationError(
            "ssl_context cannot cross into the pool's Sender process: make it with "
            "shmkafka.aiokafka.helpers.create_ssl_context (it remembers its files)"
        )
    return tls


class AIOKafkaProducer(AIOTransactions, AppendEntry):
    """aiokafka's AIOKafkaProducer, its records batched with every other process of the
    pool. ``pool=NAME`` picks the pool (default: one per distinct configuration)."""

    _closed = True  # until __init__ has run
    _started = False
    _client: Client | None = None

    def __init__(
        self, *, loop: Any = None, bootstrap_servers: Any = "localhost",
        client_id: str | None = None, metadata_max_age_ms: int = 300_000,
        request_timeout_ms: int = 40_000, api_version: Any = None, acks: Any = _MISSING,
        key_serializer: Any = None, value_serializer: Any = None,
        compression_type: str | None = None, max_batch_size: Any = _MISSING,
        partitioner: Any = None, max_request_size: int = 1_048_576, linger_ms: int = 0,
        retry_backoff_ms: int = 100, security_protocol: str = "PLAINTEXT",
        ssl_context: Any = None, connections_max_idle_ms: int = 540_000,
        enable_idempotence: bool = False, transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000, sasl_mechanism: str = "PLAIN",
        sasl_plain_password: str | None = None, sasl_plain_username: str | None = None,
        sasl_kerberos_service_name: str = "kafka", sasl_kerberos_domain_name: str | None = None,
        sasl_oauth_token_provider: Any = None, delivery_timeout_ms: int = 120_000,
        pool: str | None = None, sender_log: str | None = None, batch_max_records: int = 0,
        pool_dir: str | None = None, pool_durability: str = "memory", pool_flush_ms: int = 200,
    ) -> None:  # fmt: skip
        del connections_max_idle_ms
        del sasl_kerberos_service_name, sasl_kerberos_domain_name
        _check_arguments(loop, api_version, acks, compression_type, enable_idempotence)
        _check_security(security_protocol, ssl_context, sasl_mechanism,
                        sasl_plain_username, sasl_plain_password)  # fmt: skip
        if transactional_id is not None:
            enable_idempotence = True  # (aiokafka's rule)
        if acks is _MISSING:
            acks = "all" if enable_idempotence else 1
        tls = _tls_files(ssl_context)
        configs: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "client_id": client_id or f"aiokafka-{aio_types.peer_version()}",
            "metadata_max_age_ms": metadata_max_age_ms, "request_timeout_ms": request_timeout_ms,
            "acks": acks, "compression_type": compression_type,
            # (not given: the pool's batches grow with their load, as KafkaProducer's do)
            "batch_size": POOL_BATCH_BYTES if max_batch_size is _MISSING else max_batch_size,
            "max_request_size": max_request_size, "linger_ms": linger_ms,
            "retry_backoff_ms": retry_backoff_ms, "security_protocol": security_protocol,
            "enable_idempotence": enable_idempotence, "transactional_id": transactional_id,
            "transaction_timeout_ms": transaction_timeout_ms,
            "sasl_mechanism": sasl_mechanism if security_protocol.startswith("SASL") else None,
            "sasl_plain_username": sasl_plain_username,
            "sasl_plain_password": sasl_plain_password,
            "sasl_oauth_token_provider": sasl_oauth_token_provider,
            "delivery_timeout_ms": delivery_timeout_ms, "max_block_ms": 0,
            "pool": pool, "sender_log": sender_log, "batch_max_records": batch_max_records,
            "pool_dir": pool_dir, "pool_durability": pool_durability,
            "pool_flush_ms": pool_flush_ms,
            **(tls or {}),
        }  # fmt: skip
        try:
            self._config = resolved_config(configs)
            self._settings = settings_for(configs)
        except (KafkaError, ValueError, TypeError) as exc:  # (aiokafka's: a ValueError)
            raise ValueError(str(exc)) from None
        self._key_serializer, self._value_serializer = key_serializer, value_serializer
        self._batch_builder_bytes = (
            AIOKAFKA_BATCH_BYTES if max_batch_size is _MISSING else max_batch_size
        )
        self._partitioner = partitioner
        self._acks = self._config["acks"]
        self._max_request_size = max_request_size
        self._request_timeout_s = request_timeout_ms / 1000
        self._token_provider = sasl_oauth_token_provider
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Future[Any]] = set()
        self._checked: set[str] = set()  # topic names found legal
        # sends waiting for their topic's metadata, and those behind them, pass one gate
        # in call order (an asyncio.Lock is FIFO), so none overtakes an earlier one
        self._waiting_sends = 0
        self._gate: asyncio.Lock | None = None
        self._size_precheck = max_request_size - 1024  # (a record below it always fits)
        # the common record (bytes, no partition, timestamp or headers) takes the C append
        self._plain = key_serializer is None and value_serializer is None and partitioner is None
        self._c_plain = self._plain  # (the C append: for a transactional one, in transactions)
        self._plain = self._plain and transactional_id is None  # (a send checks the transaction)
        self._txn = None
        self._transactional_id = transactional_id
        self._init_timeout_s = delivery_timeout_ms / 1000
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ life

    async def start(self) -> None:
        """Attach to the pool (starting its Sender if none runs)."""
        if self._closed:
            raise aio_types.errors().ProducerClosed()
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        sender_log = self._config["sender_log"]
        self._client = await self._loop.run_in_executor(
            None, lambda: Client.open(self._settings, sender_log=sender_log)
        )
        if self._token_provider is not None:
            self._client.token_provider = self._token_from_loop
        handle = self._handle = self._client
        handle.on_done = weakly(self._from_thread)
        weakref.finalize(self, handle.release)  # (dropped unstopped: the slot is freed)
        # the completion thread serves from here: it also answers the Sender's token
        # questions, which the first metadata can wait on
        handle.start()
        if self._transactional_id is not None:  # (aiokafka gets its producer id at start)
            txn = TransactionClient(handle, self._transactional_id)
            try:
                await self._loop.run_in_executor(None, txn.init, self._init_timeout_s)
            except TxnCallError as exc:
                raise aiokafka_txn_error(exc) from None
            self._txn = txn
        self._started = True
        self._enable_fast(handle)

    def _txn_fast(self, on: bool) -> bool:
        # (a send checks the transaction first unless the C append is on: _plain follows it)
        self._plain = super()._txn_fast(on)
        return self._plain

    def _enable_fast(self, handle: Client) -> None:
        """Let ``_fast_append`` take the common record, with this process's client."""
        if self._plain and not self._fast_enabled():
            self._bind_entry(handle)

    def _entry_binding(self) -> EntryBinding | None:
        return EntryBinding(PARTITION_MURMUR2, self._size_precheck) if self._c_plain else None

    def _entry_client(self) -> Client | None:
        return self._handle

    async def stop(self) -> None:
        """Flush (for at most ``request_timeout_ms``) and detach; a second call does
        nothing. Records still pending stay in the pool: the Sender delivers them."""
        if self._closed:
            return
        if self._txn is not None and self._loop is not None:
            await self._loop.run_in_executor(None, self._txn.end_on_close, None)
        self._closed = True
        self._fast_disable()
        if self._client is None or self._loop is None:
            return
        handle = self._client = self._handle = self._client.in_this_process()
        timeout = self._request_timeout_s
        with contextlib.suppress(KafkaError):  # (not done within the bound: the pool has them)
            await self._loop.run_in_executor(None, handle.close, timeout)
        self._fail_pending(aio_types.errors().KafkaTimeoutError("the producer was stopped"))

    async def __aenter__(self) -> AIOKafkaProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __del__(self) -> None:
        if self._started and not self._closed:
            warnings.warn(f"Unclosed AIOKafkaProducer {self!r}", ResourceWarning, stacklevel=1)

    # ------------------------------------------------------------------ send

    async def send(
        self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
        timestamp_ms: int | None = None, headers: Iterable[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[Any]:  # fmt: skip
        """Append one record; returns an asyncio future of its RecordMetadata (None with
        acks=0)."""
        verdict: int | None = None  # (the C append tried the record and left it: entry.py)
        if (partition is None and timestamp_ms is None and headers is None and self._plain
                and not self._waiting_sends):  # fmt: skip
            loop = self._loop
            if loop is not None:  # (the common record: one C call, which checks the rest)
                future = loop.create_future()
                written = self._fast_append(topic, value, key, future)
                if written is True:
                    self._pending.add(future)
                    return future
                if written is not False:
                    verdict = written
        if value is None and key is None:
            raise AssertionError("Need at least one: key or value")
        self._live_handle()
        self._check_transactional_send()
        key_bytes = key if self._key_serializer is None else self._key_serializer(key)
        value_bytes = value if self._value_serializer is None else self._value_serializer(value)
        return await self._send_bytes(
            topic, value_bytes, key_bytes, partition, timestamp_ms, list(headers or []), verdict
        )

    async def _send_bytes(
        self, topic: str, value_bytes: bytes | None, key_bytes: bytes | None,
        partition: int | None, timestamp_ms: int | None, header_list: list[tuple[str, bytes]],
        verdict: int | None = None,
    ) -> asyncio.Future[Any]:  # fmt: skip
        handle = self._live_handle()
        entries = handle.partitions(topic)
        if entries is not None and topic in self._checked and not self._waiting_sends:
            return await self._append(handle, topic, value_bytes, key_bytes, partition,
                                      timestamp_ms, header_list, len(entries), verdict)  # fmt: skip
        # A send that waits for its topic, and every send made meanwhile, go through the
        # gate in call order: as aiokafka's, whose waiters resume in order on one metadata
        # future, a later send never lands ahead of an earlier one.
        if self._gate is None:
            self._gate = asyncio.Lock()
        self._waiting_sends += 1
        try:
            async with self._gate:
                check_topic(topic)
                self._checked.add(topic)
                count = await self._partitions(topic)
                return await self._append(handle, topic, value_bytes, key_bytes, partition,
                                          timestamp_ms, header_list, count)  # fmt: skip
        finally:
            self._waiting_sends -= 1

    async def _append(
        self, handle: Any, topic: str, value_bytes: bytes | None, key_bytes: bytes | None,
        partition: int | None, timestamp_ms: int | None, header_list: list[tuple[str, bytes]],
        count: int, verdict: int | None = None,
    ) -> asyncio.Future[Any]:  # fmt: skip
        """Append one record to a topic of ``count`` partitions (waiting, never blocking,
        for room in a full pool)."""
        if header_list or len(key_bytes or b"") + len(value_bytes or b"") > self._size_precheck:
            self._check_size(key_bytes, value_bytes, header_list)
        if partition is not None:
            if not 0 <= partition < count:
                raise AssertionError("Unrecognized partition")
        elif self._partitioner is not None:
            partitions = list(range(count))
            partition = self._partitioner(key_bytes, partitions, partitions)
        assert self._loop is not None
        future: asyncio.Future[Any] = self._loop.create_future()
        deadline = time.monotonic() + self._request_timeout_s
        handle.waits_in_send = False  # (a sync pool's commit is awaited below, in a thread)
        while True:
            try:
                handle.send(topic, value_bytes, key_bytes, header_list, partition,
                            timestamp_ms, future, False, verdict)  # fmt: skip
                break
            except MemoryExhaustedError:  # a full pool: wait for room, never block the loop
                if time.monotonic() > deadline:
                    raise aio_types.errors().KafkaTimeoutError(
                        "no room in the pool within request_timeout_ms"
                    ) from None
                await asyncio.sleep(FULL_POOL_WAIT_S)
            except KafkaError as exc:
                raise aio_types.aiokafka_error(exc) from None
        if handle.durable_sends:  # (a sync pool: the commit awaited in a thread)
            await self._loop.run_in_executor(None, handle.wait_durable)
        self._pending.add(future)
        return future

    async def send_and_wait(
        self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
        timestamp_ms: int | None = None, headers: Iterable[tuple[str, bytes]] | None = None,
    ) -> Any:  # fmt: skip
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        if future.done():
            return future.result()
        with awaiting_results():  # (the Sender wakes this process at once, unheld)
            return await future

    async def partitions_for(self, topic: str) -> set[int]:
        self._live_handle()
        return set(range(await self._partitions(topic)))

    async def flush(self) -> None:
        """Wait until every record sent so far is done."""
        handle = self._live_handle()
        assert self._loop is not None
        await self._loop.run_in_executor(None, handle.flush, None)
        if self._pending:
            await asyncio.wait(set(self._pending))

    def create_batch(self) -> aio_types.BatchBuilder:
        return aio_types.BatchBuilder(
            self._batch_builder_bytes, self._key_serializer, self._value_serializer
        )

    async def send_batch(
        self, batch: aio_types.BatchBuilder, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        """Send a batch's records to ``partition``, in order; the future gives the first
        record's metadata once all are done."""
        self._check_transactional_send()
        batch.close()
        futures = [
            await self._send_bytes(topic, value, key, partition, timestamp_ms, headers)
            for key, value, timestamp_ms, headers in batch.records
        ]
        assert self._loop is not None
        whole: asyncio.Future[Any] = self._loop.create_future()

        def done(_: Any) -> None:
            if whole.done() or not all(f.done() for f in futures):
                return
            failed = next((f.exception() for f in futures if f.exception()), None)
            if failed is not None:
                whole.set_exception(failed)
            else:
                whole.set_result(futures[0].result())

        for f in futures:
            f.add_done_callback(done)
        return whole

    # ------------------------------------------------------------------ inside

    def _live_handle(self) -> Any:
        if self._closed:
            raise aio_types.errors().ProducerClosed()
        if not self._started or self._client is None:
            raise aio_types.errors().IllegalOperation("the producer is not started")
        self._client = self._handle = self._client.in_this_process()  # (a forked child's own)
        return self._client

    async def _partitions(self, topic: str) -> int:
        """The topic's partition count, awaited (never blocking) while the Sender fetches
        its metadata; KafkaTimeoutError after ``request_timeout_ms``."""
        handle = self._handle
        assert handle is not None
        entries = handle.partitions(topic)
        if entries is not None:
            return len(entries)
        wait = handle.topic_wait(topic, fail_on_connect=True)
        while True:
            try:
                found = wait.poll()
            except ProtocolKafkaError as exc:
                raise aio_types.aiokafka_error(exc) from None
            if found is not None:
                return found
            if time.monotonic() - wait.began > self._request_timeout_s:  # (aiokafka's error)
                raise aio_types.errors().UnknownTopicOrPartitionError(
                    f"topic {topic!r} not present in metadata after "
                    f"{int(self._request_timeout_s * 1000)} ms"
                )
            await asyncio.sleep(wait.next_sleep_s())

    def _check_size(self, key: Any, value: Any, headers: list[tuple[str, bytes]]) -> None:
        size = record_size_bound(key, value, headers)  # (the accumulator's bound)
        if size > self._max_request_size:
            raise aio_types.errors().MessageSizeTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the "
                "maximum request size you have configured with the max_request_size "
                "configuration"
            )

    def _from_thread(self, done: list[Future]) -> None:
        """The completion thread: one hand-over to the loop for all of ``done``."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._deliver, done)

    def _deliver(self, done: list[Future]) -> None:
        acks_zero, pending = self._acks == 0, self._pending
        metadata = aio_types.MetadataMaker()
        for record in done:
            future = record.report
            pending.discard(future)
            if future.done():
                continue
            result = record.delivery()
            if result is None:
                continue  # (not done: handed over only once it is)
            if result.error is not None:
                future.set_exception(aio_types.aiokafka_error(result.error))
            else:
                future.set_result(None if acks_zero else metadata(record, result))

    def _fail_pending(self, error: BaseException) -> None:
        for future in list(self._pending):
            if not future.done():
                future.set_exception(error)
        self._pending.clear()

    def _token_from_loop(self) -> tuple[str, int]:
        """The completion thread asks the app's async token provider, on its loop."""
        from shmkafka.facades.kafka_python.producer import token_and_expiry

        assert self._loop is not None
        asked = asyncio.run_coroutine_threadsafe(self._token_provider.token(), self._loop)
        return token_and_expiry(asked.result(self._request_timeout_s))
