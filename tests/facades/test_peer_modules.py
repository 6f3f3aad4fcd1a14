"""No mirror hands out a peer's producer: every public name of ``shmkafka.kafka``,
``shmkafka.confluent_kafka`` and ``shmkafka.aiokafka`` (with each peer's submodules
imported, so that they are names of the peer too) is shmkafka's own, a peer object that does
not produce, or refused with an error that says what to use."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import shmkafka.aiokafka
import shmkafka.confluent_kafka
import shmkafka.confluent_kafka.aio
import shmkafka.kafka
from shmkafka.facades.peer_modules import is_producer

MIRRORS = [
    (shmkafka.kafka, "kafka"),
    (shmkafka.confluent_kafka, "confluent_kafka"),
    (shmkafka.confluent_kafka.aio, "confluent_kafka.aio"),
    (shmkafka.aiokafka, "aiokafka"),
]


def _import_submodules(peer: ModuleType) -> None:
    for info in pkgutil.iter_modules(peer.__path__):
        if info.name == "__main__":
            continue
        with contextlib.suppress(ImportError):  # (an optional dependency of the peer's)
            importlib.import_module(f"{peer.__name__}.{info.name}")


def _ours(obj: object) -> bool:
    module = obj.__name__ if isinstance(obj, ModuleType) else getattr(obj, "__module__", "")
    return str(module).startswith("shmkafka")


@pytest.mark.parametrize(("mirror", "peer_name"), MIRRORS, ids=[p for _, p in MIRRORS])
def test_every_name_is_ours_harmless_or_refused(mirror: ModuleType, peer_name: str) -> None:
    peer = importlib.import_module(peer_name)
    _import_submodules(peer)
    names = sorted({n for n in dir(peer) if not n.startswith("_")} | set(mirror.__all__))
    refused, passed = [], []
    for name in names:
        try:
            obj = getattr(mirror, name)
        except AttributeError as exc:
            assert "use " in str(exc) and "outside shmkafka's pool" in str(exc), (name, exc)
            refused.append(name)
            continue
        if _ours(obj):
            continue
        assert not is_producer(obj), f"{mirror.__name__}.{name} is {peer_name}'s producer"
        passed.append(name)
    producers = [n for n in names if is_producer(getattr(peer, n))]
    assert set(refused) == {n for n in producers if not _ours(getattr(mirror, n, None))}
    assert passed  # (consumers and value types still pass through)


def test_the_producers_are_shmkafkas() -> None:
    assert inspect.getmodule(shmkafka.kafka.KafkaProducer).__name__.startswith("shmkafka")  # type: ignore[union-attr]
    assert shmkafka.confluent_kafka.Producer.__module__.startswith("shmkafka")
    assert shmkafka.aiokafka.AIOKafkaProducer.__module__.startswith("shmkafka")
    assert shmkafka.confluent_kafka.SerializingProducer.__module__.startswith("shmkafka")
    assert shmkafka.confluent_kafka.aio.AIOProducer.__module__.startswith("shmkafka")
    assert shmkafka.confluent_kafka.aio.AsyncSerializingProducer.__module__.startswith("shmkafka")
    assert issubclass(
        shmkafka.confluent_kafka.aio.AsyncSerializingProducer,
        shmkafka.confluent_kafka.aio.AIOProducer,
    )
