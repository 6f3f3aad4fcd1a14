"""The sidecar (``shmkafka sender --create``): a Sender like any other, though it imports the
facades to learn the settings their producers ask for."""

from __future__ import annotations

import argparse

import pytest

from shmkafka.cli import sidecar
from shmkafka.facades.kafka_python import peer_errors
from shmkafka.protocol.errors import KafkaError


def test_the_sidecars_sender_makes_its_own_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kafka-python facade, which the sidecar imports, makes every KafkaError a twin of
    kafka-python's class; the Sender it runs makes its own (and so imports no peer library
    when it raises one)."""
    # (as the facade's import left it; restored after the test)
    monkeypatch.setattr(KafkaError, "twin_class", peer_errors.twin_class)
    seen: list[object] = []

    def sender_run(args: argparse.Namespace, create: object) -> int:
        seen.append(KafkaError.twin_class)
        seen.append(type(KafkaError("x")))
        return 0

    monkeypatch.setattr(sidecar.sender_command, "run", sender_run)
    assert sidecar.run(argparse.Namespace(create=False)) == 0
    assert seen == [None, KafkaError]
