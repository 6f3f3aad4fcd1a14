"""confluent-kafka's SerializingProducer over the pool: ``key.serializer`` and
``value.serializer`` (or their ``.builder`` forms) run in the app, then the bytes go through
shmkafka's ``Producer``. Needs confluent-kafka installed: its serializers, its
``SerializationContext`` and its ``KeySerializationError``/``ValueSerializationError``.

Rules (confluent-kafka 2.16's):
- A closed producer or a topic that is not a str fails before a serializer runs (they may
  register schemas).
- A serializer's exception is raised as KeySerializationError / ValueSerializationError.
- ``close()`` closes the producer, then the serializers it built from builders (not those
  given ready-made); a second call does nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Generator
from typing import Any

from shmkafka.facades.confluent.producer import Producer


def serde_builder() -> Any:
    """confluent-kafka's builder helpers, or None (an older confluent-kafka)."""
    try:
        return importlib.import_module("confluent_kafka._serde_builder")
    except ImportError:
        return None


class SerdeTypes:
    """confluent-kafka's SerializationContext, MessageField and the two serialization
    errors, for a serializing producer (``who`` names it when confluent-kafka is missing)."""

    def __init__(self, who: str) -> None:
        try:
            serialization = importlib.import_module("confluent_kafka.serialization")
            errors = importlib.import_module("confluent_kafka.error")
        except ImportError:
            raise ImportError(
                f"shmkafka.confluent_kafka.{who} needs confluent-kafka installed "
                "(its serializers and SerializationContext)"
            ) from None
        self.context = serialization.SerializationContext
        self.fields = serialization.MessageField
        self.key_error = errors.KeySerializationError
        self.value_error = errors.ValueSerializationError


# The serialize step: yields each serializer's result and is sent back its value (awaited,
# for the asyncio producer); returns the serialized key and value.
Serializing = Generator[Any, Any, tuple[Any, Any]]


def serialize(types: SerdeTypes, serializers: tuple[Any, Any], topic: str, key: Any,
              value: Any, headers: Any) -> Serializing:  # fmt: skip
    """The key, then the value, through their serializers (None: as given), a serializer's
    exception raised as KeySerializationError / ValueSerializationError. The one step of
    both serializing producers: ``serialized`` drives it, aio_serializing.py awaits it."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    key_serializer, value_serializer = serializers
    ctx = types.context(topic, types.fields.KEY, headers)
    if key_serializer is not None:
        try:
            key = yield key_serializer(key, ctx)
        except Exception as exc:
            raise types.key_error(exc) from exc
    ctx.field = types.fields.VALUE
    if value_serializer is not None:
        try:
            value = yield value_serializer(value, ctx)
        except Exception as exc:
            raise types.value_error(exc) from exc
    return key, value


def serialized(step: Serializing) -> tuple[Any, Any]:
    """Run the serialize step with plain (blocking) serializers."""
    try:
        result = next(step)
        while True:
            result = step.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class SerializingProducer(Producer):
    """confluent-kafka's SerializingProducer, its records batched with every other process
    of the pool."""

    _serializing_closed = False

    def __init__(self, conf: dict[str, Any]) -> None:
        self._types = SerdeTypes("SerializingProducer")
        serdes, self._owned_serdes, rest, resolver = self._build(dict(conf))
        self._key_serializer, self._value_serializer = serdes
        try:
            super().__init__(rest)
            if resolver is not None:
                resolver(self.cluster_id, serdes)
        except BaseException:
            owned, self._owned_serdes = self._owned_serdes, []
            self._close_serdes(owned)
            raise

    @staticmethod
    def _build(conf: dict[str, Any]) -> tuple[list[Any], list[Any], dict[str, Any], Any]:
        """The serializers (built from ``.builder`` properties, as confluent-kafka does when
        it has them), those built here, what remains of the configuration, and how to hand
        the serializers the cluster id."""
        builder = serde_builder()
        if builder is None:  # (an older confluent-kafka: ready-made serializers only)
            serdes = [conf.pop("key.serializer", None), conf.pop("value.serializer", None)]
            return serdes, [], conf, None
        specs, rest = builder.pop_serde_props(conf, "key.serializer", "value.serializer")
        serdes, owned, rest = builder.build_serdes(specs, rest)

        def resolver(cluster_id: Any, built: list[Any]) -> None:
            shared = builder.SharedClusterIdResolver(cluster_id)
            builder.propagate_cluster_id_resolver(shared, built)

        return list(serdes), list(owned), rest, resolver

    @staticmethod
    def _close_serdes(serdes: list[Any]) -> None:
        builder = serde_builder()
        if builder is not None:
            builder.close_serdes(serdes)

    def produce(  # type: ignore[override]
        self, topic: str, key: Any = None, value: Any = None, partition: int = -1,
        on_delivery: Any = None, timestamp: int = 0, headers: Any = None,
    ) -> None:  # fmt: skip
        """Serialize the key and the value, then produce the bytes (confluent-kafka's)."""
        if self._serializing_closed:
            raise RuntimeError("Producer has been closed")
        serializers = (self._key_serializer, self._value_serializer)
        key, value = serialized(serialize(self._types, serializers, topic, key, value, headers))
        super().produce(topic, value, key, partition=partition, on_delivery=on_delivery,
                        timestamp=timestamp, headers=headers)  # fmt: skip

    def close(self, timeout: float = -1) -> bool:
        """Close the producer, then the serializers it built; a second call does nothing."""
        if self._serializing_closed:
            return True
        result = super().close(timeout)
        self._serializing_closed = True
        owned, self._owned_serdes = self._owned_serdes, []
        self._close_serdes(owned)
        return result

    def __exit__(self, *exc: object) -> None:
        self.close()
