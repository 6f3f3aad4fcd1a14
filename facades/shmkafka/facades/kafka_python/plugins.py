"""kafka-python 3.x's plug-in interfaces for ``KafkaProducer``: serializers and partitioners,
with its default implementations, and the cluster view a partitioner is given.

Rules:
- A serializer is a ``Serializer`` (``serialize(topic, headers, data)``; an object whose
  ``serialize`` takes ``(topic, data)`` is called so, as kafka-python falls back to) or a
  plain callable (``fn(data)``). It is called for ``None`` too, as kafka-python does.
- A partitioner is a ``Partitioner`` (``partition(topic, key, serialized_key, value,
  serialized_value, cluster)``), kafka-python 2.x's callable ``(serialized_key,
  all_partitions, available_partitions)``, or an object with 2.x's ``partition(topic,
  serialized_key, cluster)``. ``DefaultPartitioner`` (ours or kafka-python's) means the
  pool's own choice: murmur2 for keys as kafka-python, and one partition shared by the
  pool's producers for keyless records (KIP-480 sticky) where kafka-python picks at random.
- kafka-python's own classes are recognised when it is imported (``sys.modules``): this
  module never imports it.
"""

from __future__ import annotations

import json
import random
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from shmkafka.protocol.hashing import murmur2, to_positive

Headers = list[tuple[str, bytes]]


class Serializer(ABC):
    @abstractmethod
    def serialize(self, topic: str, headers: Headers, data: Any) -> bytes | None: ...

    def close(self) -> None:
        return None


class Deserializer(ABC):
    @abstractmethod
    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any: ...

    def close(self) -> None:
        return None


class DefaultSerializer(Serializer, Deserializer):
    """str → its encoding; bytes-like and None as they are."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def serialize(self, topic: str, headers: Headers, data: Any) -> Any:
        if data is None or isinstance(data, bytes | bytearray | memoryview):
            return data
        return data.encode(self.encoding)

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        return None if data is None else data.decode(self.encoding)


class JsonSerializer(DefaultSerializer):
    def serialize(self, topic: str, headers: Headers, data: Any) -> Any:
        return None if data is None else super().serialize(topic, headers, json.dumps(data))

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        return None if data is None else json.loads(super().deserialize(topic, headers, data))


class SerializeWrapper(Serializer):
    """A kafka-python 2.x serializer function as a ``Serializer``."""

    def __init__(self, fn: Callable[[Any], Any] | None) -> None:
        self.fn = fn

    def serialize(self, topic: str, headers: Headers, data: Any) -> Any:
        return data if self.fn is None else self.fn(data)


class DeserializeWrapper(Deserializer):
    def __init__(self, fn: Callable[[bytes | None], Any] | None) -> None:
        self.fn = fn

    def deserialize(self, topic: str, headers: Headers, data: bytes | None) -> Any:
        return data if self.fn is None else self.fn(data)


def serialize(serializer: Any, topic: str, headers: Headers, data: Any) -> Any:
    """Run a configured serializer as kafka-python 3.x does."""
    if serializer is None:
        return data
    if not hasattr(serializer, "serialize"):
        return serializer(data)
    try:
        return serializer.serialize(topic, headers, data)
    except TypeError:
        if _is_peer(serializer, "Serializer") or isinstance(serializer, Serializer):
            raise
        return serializer.serialize(topic, data)  # a 2.x Serializer


# ----------------------------------------------------------------------------- partitioners


class ClusterView:
    """What kafka-python's ``ClusterMetadata`` tells a partitioner, from the pool's
    directory: ``topics()``, ``partitions_for_topic``, ``available_partitions_for_topic``."""

    def __init__(self, leaders: dict[str, list[int]]) -> None:
        self._leaders = leaders  # topic → leader node id per partition (-1 none)

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        del exclude_internal_topics
        return set(self._leaders)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        leaders = self._leaders.get(topic)
        return None if leaders is None else set(range(len(leaders)))

    def available_partitions_for_topic(self, topic: str) -> set[int] | None:
        leaders = self._leaders.get(topic)
        return None if leaders is None else {p for p, node in enumerate(leaders) if node >= 0}

    def leader_for_partition(self, partition: Any) -> int | None:
        leaders = self._leaders.get(partition[0])
        if leaders is None or not 0 <= partition[1] < len(leaders):
            return None
        return int(leaders[partition[1]])


class Partitioner(ABC):
    @abstractmethod
    def partition(
        self, topic: str, key: Any, serialized_key: bytes | None, value: Any,
        serialized_value: bytes | None, cluster: Any,
    ) -> int: ...  # fmt: skip


class DefaultPartitioner(Partitioner):
    """murmur2 of the key (as the Java client); a random available partition without one."""

    def partition(
        self, topic: str, key: Any, serialized_key: bytes | None, value: Any,
        serialized_value: bytes | None, cluster: Any,
    ) -> int:  # fmt: skip
        if topic not in cluster.topics():
            raise ValueError(f"Topic {topic} not found in ClusterMetadata")
        every = sorted(cluster.partitions_for_topic(topic))
        if serialized_key is not None:
            return int(every[to_positive(murmur2(serialized_key)) % len(every)])
        available = sorted(cluster.available_partitions_for_topic(topic) or ())
        return int(random.choice(available or every))


def is_default_partitioner(partitioner: Any) -> bool:
    if partitioner is None or type(partitioner) is DefaultPartitioner:
        return True
    peer = sys.modules.get("kafka.partitioner")
    return peer is not None and type(partitioner) is getattr(peer, "DefaultPartitioner", None)


def choose_partition(
    partitioner: Any, topic: str, key: Any, key_bytes: bytes | None, value: Any,
    value_bytes: bytes | None, cluster: ClusterView,
) -> Any:  # fmt: skip
    """A configured (not default) partitioner's choice, called as kafka-python 3.x does."""
    if isinstance(partitioner, Partitioner) or _is_peer(partitioner, "Partitioner"):
        return partitioner.partition(topic, key, key_bytes, value, value_bytes, cluster)
    if hasattr(partitioner, "partition"):
        return partitioner.partition(topic, key_bytes, cluster)
    every = sorted(cluster.partitions_for_topic(topic) or ())
    available = sorted(cluster.available_partitions_for_topic(topic) or ())
    return partitioner(key_bytes, every, available)


def _is_peer(obj: Any, name: str) -> bool:
    """``obj`` is an instance of kafka-python's class ``name`` (if kafka-python is loaded)."""
    module = sys.modules.get("kafka.serializer" if "erializer" in name else "kafka.partitioner")
    peer = getattr(module, name, None) if module is not None else None
    return isinstance(peer, type) and isinstance(obj, peer)
