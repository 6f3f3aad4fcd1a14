"""confluent-kafka 2.16's ``confluent_kafka.aio.AsyncSerializingProducer`` over the pool
(``shmkafka.confluent_kafka.aio``): ``key.serializer`` and ``value.serializer`` (or their
``.builder`` forms) run on the loop, then the bytes go through shmkafka's ``AIOProducer``.
Needs confluent-kafka installed: its serializers, its ``SerializationContext`` and its
``KeySerializationError``/``ValueSerializationError``.

Rules (confluent-kafka 2.16's):
- Construction is awaited: ``producer = await AsyncSerializingProducer(conf)`` builds the
  serializers of the ``.builder`` properties (whose ``build()`` may be a coroutine), then
  the producer; if the producer fails to construct, the serializers built are closed.
  ``__init__`` is the coroutine function awaited, as in confluent-kafka's (a subclass's
  ``async def __init__`` awaits ``super().__init__(conf)``).
- A serializer is a plain callable or an asyncio one: what it returns is awaited if it is
  awaitable. The asyncio serializers are handed an awaitable resolver of the cluster id
  (``cluster_id`` in the executor, one call in flight); the blocking ones get none.
- A closed producer (``RuntimeError``) or a topic that is not a str (``TypeError``) fails
  before a serializer runs (they may register schemas); ``headers`` still reach the
  serializers' context and are then refused by ``AIOProducer`` (``NotImplementedError``),
  as confluent-kafka's are.
- A serializer's exception is raised as KeySerializationError / ValueSerializationError.
- ``close()`` closes the producer, then the serializers it built (not those given
  ready-made); if closing the producer raises, they are kept for the next call; a second
  call does nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from shmkafka.facades.confluent.aio import AIOProducer
from shmkafka.facades.confluent.serializing import (
    SerdeTypes,
    Serializing,
    serde_builder,
    serialize,
)

_P = TypeVar("_P", bound="AsyncSerializingProducer")


async def _serialized(step: Serializing) -> tuple[Any, Any]:
    """Run the serialize step (serializing.py), awaiting what a serializer returns when it
    is awaitable."""
    try:
        result = next(step)
        while True:
            try:
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:  # noqa: BLE001 (the step raises it as its own error)
                result = step.throw(exc)
            else:
                result = step.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class AsyncSerializingProducer(AIOProducer):
    """confluent-kafka's AsyncSerializingProducer, its records batched with every other
    process of the pool. Constructed with ``await AsyncSerializingProducer(conf, **kwargs)``
    (``kwargs`` as ``AIOProducer``'s: ``max_workers``, ``executor``...)."""

    _owned_serdes: list[Any]

    # Calling the class gives the coroutine that awaits the producer's (async) __init__:
    # Python calls no __init__ on what __new__ returns when it is not an instance of the class.
    def __new__(  # type: ignore[misc]
        cls: type[_P], conf: dict[str, Any], **kwargs: Any
    ) -> Coroutine[Any, Any, _P]:
        return cls._construct(object.__new__(cls), conf, **kwargs)

    @staticmethod
    async def _construct(producer: _P, conf: dict[str, Any], **kwargs: Any) -> _P:
        init: Any = getattr(producer, "__init__")  # noqa: B009 (its async one, not AIOProducer's)
        await init(conf, **kwargs)
        return producer

    async def _init(self, conf: dict[str, Any], **kwargs: Any) -> None:
        conf = dict(conf)
        self._types = SerdeTypes("aio.AsyncSerializingProducer")
        builder = serde_builder()
        if builder is None:  # (ready-made serializers only)
            serdes = [conf.pop("key.serializer", None), conf.pop("value.serializer", None)]
            self._owned_serdes, rest = [], conf
        else:
            specs, rest = builder.pop_serde_props(conf, "key.serializer", "value.serializer")
            serdes, owned, rest = await builder.async_build_serdes(specs, rest)
            self._owned_serdes = list(owned)
        self._key_serializer, self._value_serializer = serdes
        try:
            AIOProducer.__init__(self, rest, **kwargs)
            if builder is not None:
                shared = builder.AsyncSharedClusterIdResolver(self.cluster_id)
                builder.propagate_async_cluster_id_resolver(shared, list(serdes))
        except BaseException:
            owned, self._owned_serdes = self._owned_serdes, []
            with contextlib.suppress(Exception):  # (the construction error is the one raised)
                await self._close_serdes(owned)
            raise

    if not TYPE_CHECKING:  # (typed by __new__; AIOProducer.__init__ is not a coroutine)
        __init__ = _init

    @staticmethod
    async def _close_serdes(serdes: list[Any]) -> None:
        builder = serde_builder()
        if builder is not None and serdes:
            await builder.async_close_serdes(serdes)

    async def produce(  # type: ignore[override]
        self, topic: str, key: Any = None, value: Any = None, partition: int = -1,
        timestamp: int = 0, headers: Any = None,
    ) -> asyncio.Future[Any]:  # fmt: skip
        """Serialize the key and the value, then produce the bytes; returns an asyncio future
        of the delivered Message (confluent-kafka's)."""
        if self._closed:
            raise RuntimeError("Producer has been closed")
        serializers = (self._key_serializer, self._value_serializer)
        step = serialize(self._types, serializers, topic, key, value, headers)
        key, value = await _serialized(step)
        kwargs: dict[str, Any] = {}
        if partition != -1:
            kwargs["partition"] = partition
        if timestamp != 0:
            kwargs["timestamp"] = timestamp
        if headers is not None:
            kwargs["headers"] = headers
        return await super().produce(topic, value, key, **kwargs)

    async def close(self) -> None:
        """Close the producer, then the serializers it built; a second call does nothing
        more."""
        await super().close()  # (AIOProducer's: does nothing once closed)
        owned, self._owned_serdes = self._owned_serdes, []
        await self._close_serdes(owned)
