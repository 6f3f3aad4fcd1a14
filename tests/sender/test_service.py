"""The Sender's service (sender/service.py): what it sets up around its rounds."""

from __future__ import annotations

from typing import Any

import pytest

from shmkafka.facades.kafka_python import peer_errors
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.errors import KafkaError
from shmkafka.sender import service


def test_the_senders_errors_are_its_own(pool: SharedPool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sidecar imports the facades, and the kafka-python one makes every KafkaError a twin
    of its peer's class; while the Sender serves, its errors are its own (it imports no
    peer library to raise one), and the hook is back once it returns."""
    monkeypatch.setattr(KafkaError, "twin_class", peer_errors.twin_class)  # (as the facade sets)
    seen: list[Any] = []

    def serve(*args: Any) -> int:
        seen.extend((KafkaError.twin_class, type(KafkaError("x"))))
        return 0

    monkeypatch.setattr(service, "_serve", serve)
    assert service.run_sender(pool.name, SenderConfig(bootstrap_servers=["127.0.0.1:1"])) == 0
    assert seen == [None, KafkaError]
    assert KafkaError.twin_class is peer_errors.twin_class
