"""confluent-kafka 2.16's ``confluent_kafka.aio.AIOProducer`` over the pool
(``shmkafka.confluent_kafka.aio``).

Rules:
- ``await produce(...)`` hands the record to shmkafka's ``Producer`` at once (its
  ``produce`` never blocks: a record whose topic is not known yet waits in this process)
  and returns an asyncio future of the delivered ``Message``, or of its ``KafkaException``.
  A full pool is awaited, for up to the delivery timeout (then _QUEUE_FULL in the future).
- Delivery reports reach the loop in bulk: the completion thread hands each wake's reports
  to the loop in one ``call_soon_threadsafe``, and they resolve the futures there; nobody
  has to call ``poll()`` for them. While records wait for their topic, a task on the loop
  looks for it (as ``poll(0)`` would) until none waits.
- ``AsyncSerializingProducer`` (aio_serializing.py) is this class with the
  serializers run on the loop first.
- ``flush``, ``poll``, ``purge``, ``list_topics``, ``cluster_id``, the transaction calls and
  ``close`` run the blocking ``Producer`` calls in the executor (``max_workers`` threads, or
  the one given): the loop never blocks. ``headers`` are refused as confluent-kafka's batch
  mode refuses them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from typing import Any

from shmkafka.facades.confluent.producer import Producer
from shmkafka.facades.confluent.records import Report, delivered_message, message_for
from shmkafka.facades.confluent.types import KafkaError, KafkaException
from shmkafka.producer.client import FULL_POOL_WAIT_S
from shmkafka.producer.futures import Future
from shmkafka.producer.topics import metadata_poll_s

NO_HEADERS = (
    "Headers are not supported in AIOProducer batch mode. "
    "Use the synchronous Producer.produce() method if headers are required."
)


class _LoopProducer(Producer):
    """shmkafka's Producer whose delivery reports run on an event loop."""

    loop: asyncio.AbstractEventLoop | None = None
    _room_wait_ms = 0  # produce() runs on the loop: a full pool is awaited, not waited in

    def _queue_reports(self, futures: list[Future]) -> None:
        if self._settings["report_only_errors"]:
            futures = [f for f in futures if not f.succeeded()]
        loop = self.loop
        if loop is None or loop.is_closed():  # (no loop to resolve an asyncio future on)
            futures = [f for f in futures if not isinstance(f.report[0], asyncio.Future)]
            super()._queue_reports(futures)
            return
        loop.call_soon_threadsafe(self._serve_on_loop, futures)

    def _serve_on_loop(self, futures: list[Future]) -> None:
        for future in futures:
            self._serve_report(future)

    @staticmethod
    def _serve_report(item: Report | Future) -> BaseException | None:
        """A record of ``AIOProducer.produce`` resolves its asyncio future (its report's
        callback); any other report is served as ``Producer``'s."""
        if isinstance(item, Report):
            future, data, error = item.future, item.report, item.error
        else:  # (the common case: no Report made for it)
            future, data, error = item, item.report, None
        target = data[0]
        if not isinstance(target, asyncio.Future):
            return Producer._serve_report(item)
        if target.done():
            return None
        message = None
        if future is not None and error is None:
            message = delivered_message(future, *data[1:])
        if message is None:
            report = item if isinstance(item, Report) else Report(item, data, None)
            message = message_for(report)
        loop = target.get_loop()
        if _running_loop() is loop:
            _resolve(target, message)
        elif not loop.is_closed():  # (served by flush() in the executor: hand it over)
            loop.call_soon_threadsafe(_resolve, target, message)
        return None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # (an executor thread)
        return None


def _resolve(target: asyncio.Future[Any], message: Any) -> None:
    """Set a record's asyncio future from its delivered (or failed) Message, on its loop."""
    if target.done():
        return
    error = message.error()
    if error is not None:
        target.set_exception(KafkaException(error))
    else:
        target.set_result(message)


def _in_executor(name: str) -> Callable[..., Awaitable[Any]]:
    """An AIOProducer method that runs Producer's ``name`` in the executor."""

    async def call(self: AIOProducer, *args: Any, **kwargs: Any) -> Any:
        return await self._call(getattr(self._producer, name), *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``Producer.{name}``, run in the executor."
    return call


class AIOProducer:
    """confluent-kafka's AIOProducer, its records batched with every other process of the
    pool."""

    def __init__(
        self, producer_conf: dict[str, Any], max_workers: int = 4,
        executor: concurrent.futures.Executor | None = None, batch_size: int = 1000,
        buffer_timeout: float = 1.0,
    ) -> None:  # fmt: skip
        del batch_size, buffer_timeout  # (the pool batches; nothing waits in this process)
        self._producer = _LoopProducer(producer_conf)
        self._own_executor = executor is None
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(max_workers)
        self._tending: asyncio.Task[None] | None = None
        self._closed = False

    async def __aenter__(self) -> AIOProducer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def produce(
        self, topic: str, value: Any = None, key: Any = None, *args: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        """Queue one record; returns an asyncio future of its delivered Message."""
        if "headers" in kwargs:
            raise NotImplementedError(NO_HEADERS)
        loop = asyncio.get_running_loop()
        self._producer.loop = loop
        result: asyncio.Future[Any] = loop.create_future()
        kwargs["on_delivery"] = result  # (the report's "callback": _serve_report resolves it)
        await self._produce_when_room(result, topic, value, key, *args, **kwargs)
        if self._producer._reports:  # (failed before the pool, e.g. an illegal topic)
            self._producer.poll(0)
        if self._producer._unassigned and (self._tending is None or self._tending.done()):
            self._tending = loop.create_task(self._tend())
        return result

    async def _produce_when_room(
        self, result: asyncio.Future[Any], topic: str, *args: Any, **kwargs: Any
    ) -> None:
        """``Producer.produce``; a full pool is awaited (never spun on, never blocking the
        loop) for up to the delivery timeout, then the future fails with _QUEUE_FULL, as
        confluent-kafka's fails a record its queue refused."""
        deadline = time.monotonic() + self._producer._settings["delivery_timeout_ms"] / 1000
        while True:
            try:
                self._producer.produce(topic, *args, **kwargs)
                return
            except BufferError:
                if time.monotonic() >= deadline:
                    result.set_exception(KafkaException(KafkaError(KafkaError._QUEUE_FULL)))
                    return
                await asyncio.sleep(FULL_POOL_WAIT_S)

    async def _tend(self) -> None:
        """Append the records that waited for their topic, once it is known."""
        waited = 0.0
        while self._producer._unassigned and not self._closed:
            self._producer.poll(0)
            step = metadata_poll_s(waited)
            waited += step
            await asyncio.sleep(step)

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        self._producer.loop = loop
        return await loop.run_in_executor(self._executor, lambda: method(*args, **kwargs))

    async def flush(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call(self._producer.flush, *args, **kwargs)

    async def poll(self, timeout: float = 0, *args: Any, **kwargs: Any) -> int:
        result: int = await self._call(self._producer.poll, timeout, *args, **kwargs)
        return result

    purge = _in_executor("purge")
    list_topics = _in_executor("list_topics")
    cluster_id = _in_executor("cluster_id")
    set_sasl_credentials = _in_executor("set_sasl_credentials")
    init_transactions = _in_executor("init_transactions")
    begin_transaction = _in_executor("begin_transaction")
    commit_transaction = _in_executor("commit_transaction")
    abort_transaction = _in_executor("abort_transaction")
    send_offsets_to_transaction = _in_executor("send_offsets_to_transaction")

    async def close(self) -> None:
        """Flush, then close the producer and the executor it made (a second call does
        nothing)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.flush()
        finally:
            await self._call(self._producer.close)
            if self._own_executor:
                self._executor.shutdown(wait=False)
