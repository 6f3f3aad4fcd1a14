"""The directory's crash windows (layout v5): the Sender SIGKILLed while it adds a topic
(deques and partitions counted, the topic not yet; the topic written, not yet counted), and
an app SIGKILLed during its first send to a new topic (its request written under the
directory lock, not yet counted; waiting for the metadata). The next Sender adds the topic
whole, the next app's send to it succeeds, every record is delivered once, and the pool is
consistent."""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.producer.client import Client
from tests import ledger
from tests.integration import e2e_workers
from tests.integration.kafka_io import consume_all

pytestmark = pytest.mark.usefixtures("pool_removed")
TOPICS = [f"grow{i}" for i in range(4)]


def _arm(monkeypatch: pytest.MonkeyPatch, point: str, marker: Path) -> None:
    monkeypatch.setenv("SHMKAFKA_FAULT_AT", point)
    monkeypatch.setenv("SHMKAFKA_FAULT_FILE", str(marker))


def _read_back(stub: BrokerStub, topic: str, partitions: int, count: int) -> list[bytes]:
    peer = SimpleNamespace(bootstrap=stub.bootstrap)
    return [m.value() for m in consume_all(peer, topic, list(range(partitions)), count)]


@pytest.mark.parametrize("point", ["directory.after_partitions", "directory.before_count"])
def test_a_sender_killed_while_the_directory_grows(
    pool_name: str, point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "fired"
    with BrokerStub(nodes=1, partitions=3) as stub:
        for topic in TOPICS:
            stub.create_topic(topic, 3)
        config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5}
        with monkeypatch.context() as armed:
            _arm(armed, point, marker)  # inherited by the Senders this producer starts
            handle = Client(pool_name, config, sender_idle_exit_ms=500)
        try:
            first_sender = handle.pool.sender()[0]
            futures = [
                handle.send(topic, b"%s:%d" % (topic.encode(), i), partition=i % 3)
                for topic in TOPICS
                for i in range(50)
            ]
            handle.flush(60)
            assert all(f.succeeded() for f in futures), [f.exception for f in futures][:3]
            assert marker.read_text() == point  # a Sender died there; the next took over
            assert handle.pool.sender()[0] != first_sender
            snapshot = handle.pool.directory.snapshot()
            assert all(len(snapshot.topics[t]) == 3 for t in TOPICS)
            assert len(snapshot.topics) == len(TOPICS)  # no topic twice, none torn
            handle.pool.reclaim_dead()
            assert handle.pool.check_invariants() == []
        finally:
            handle.close(10)
        for topic in TOPICS:
            values = _read_back(stub, topic, 3, 50)
            assert sorted(values) == sorted(b"%s:%d" % (topic.encode(), i) for i in range(50))
    ledger.note(f"Sender killed at {point}", sender_kills=1, records=50 * len(TOPICS))


@pytest.mark.parametrize("point", ["topic.before_request_count", "topic.waiting"])
def test_an_app_killed_in_its_first_send_to_a_new_topic(
    pool_name: str, point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "fired"
    with BrokerStub(nodes=1, partitions=2) as stub:
        stub.create_topic("fresh", 2)
        stub.create_topic("known", 2)
        config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5}
        observer = Client(pool_name, config, sender_idle_exit_ms=500)
        try:
            observer.send("known", b"before").get(30)
            sender = observer.pool.sender()[0]
            ctx = mp.get_context("spawn")
            last: Any = ctx.Value("q", -1, lock=False)
            with monkeypatch.context() as armed:
                _arm(armed, point, marker)
                victim = ctx.Process(
                    target=e2e_workers.send_until_killed,
                    args=(pool_name, config, "fresh", 1, last),
                )
                victim.start()
            victim.join(60)
            assert victim.exitcode == -signal.SIGKILL and marker.read_text() == point
            assert last.value == -1  # it died before its first send returned
            started = time.monotonic()
            futures = [observer.send("fresh", b"after:%d" % i, partition=i % 2) for i in range(40)]
            observer.flush(30)
            assert all(f.succeeded() for f in futures)
            assert time.monotonic() - started < 20  # the directory lock was recovered
            assert observer.pool.sender()[0] == sender  # the Sender never noticed
            observer.pool.reclaim_dead()
            assert observer.pool.check_invariants() == []
        finally:
            observer.close(10)
        values = _read_back(stub, "fresh", 2, 40)
    assert sorted(values) == sorted(b"after:%d" % i for i in range(40))
    ledger.note(f"app killed at {point}", app_kills=1, records=41)


@pytest.mark.parametrize("point", ["directory.retiring", "directory.retired"])
def test_a_sender_killed_while_it_retires_an_idle_topic(
    pool_name: str, point: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed holding the directory and stripe locks, the topic's sequences saved (and its
    shape RETIRED, the version not yet moved): the app's next records to the topic wait for
    the locks, go in, and the next Sender delivers them after the first ones, exactly once,
    and in order (its idempotent sequences carry on)."""
    marker = tmp_path / "fired"
    with BrokerStub(nodes=1, partitions=1) as stub:
        stub.create_topic("quiet", 1)
        config = {"bootstrap_servers": [stub.bootstrap], "linger_ms": 5,
                  "metadata_max_idle_ms": 200}  # fmt: skip
        with monkeypatch.context() as armed:
            _arm(armed, point, marker)
            handle = Client(pool_name, config, sender_idle_exit_ms=500)
        try:
            first_sender = handle.pool.sender()[0]
            for i in range(30):
                handle.send("quiet", b"%d" % i, partition=0)
            handle.flush(30)
            deadline = time.monotonic() + 30
            # the Sender retires the topic once it is idle (the marker is made, then written)
            while not (marker.exists() and marker.read_text()):
                assert time.monotonic() < deadline, "the idle topic was never retired"
                handle.pool.directory.snapshot()  # (the app keeps reading the directory)
                time.sleep(0.05)
            assert marker.read_text() == point
            futures = [handle.send("quiet", b"%d" % i, partition=0) for i in range(30, 60)]
            handle.flush(60)
            assert all(f.succeeded() for f in futures), [f.exception for f in futures][:3]
            assert handle.pool.sender()[0] != first_sender
            handle.pool.reclaim_dead()
            assert handle.pool.check_invariants() == []
        finally:
            handle.close(10)
        values = _read_back(stub, "quiet", 1, 60)
    assert values == [b"%d" % i for i in range(60)]
    ledger.note(f"Sender killed at {point}", sender_kills=1, records=60)
