"""``shmkafka sender --pool NAME --create``: a sidecar Sender makes its pool with the settings
the apps' producers ask for, serves them (no Sender of their own), refuses a producer with
other settings, and stays up when no producer is attached. On Tansu."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shmkafka.confluent_kafka import Producer
from shmkafka.errors import PoolSettingsMismatchError
from shmkafka.kafka import KafkaProducer
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.pool.stat import pool_stat
from shmkafka.sender.service import IDLE_EXIT_MS
from tests.integration.kafka_io import consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")
SHMKAFKA = os.path.join(os.path.dirname(sys.executable), "shmkafka")


@pytest.fixture
def sidecar(tansu: Peer, pool_name: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    settings = tmp_path / "producer.properties"
    settings.write_text("# as the apps give them\nlinger_ms=5\n")
    proc = subprocess.Popen(
        [SHMKAFKA, "sender", "--pool", pool_name, "--create", "--bootstrap-server",
         tansu.bootstrap, "--producer.config", str(settings), "--producer-property",
         "acks=all"],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (SharedPool.exists(pool_name) and pool_stat(pool_name)["sender"]["alive"]):
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the sidecar did not come up"
        time.sleep(0.05)
    yield proc
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)


def test_the_apps_producers_attach_to_the_sidecars_pool(
    tansu: Peer, pool_name: str, sidecar: subprocess.Popen[bytes]
) -> None:
    topic = unique_topic("sidecar")
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=5,
                             acks="all")  # fmt: skip
    try:
        metadata = [producer.send(topic, b"%d" % i, key=b"k").get(30) for i in range(20)]
        assert [m.offset for m in metadata] == list(range(20))
        assert pool_stat(pool_name)["sender"]["pid"] == sidecar.pid  # served by the sidecar
    finally:
        producer.close()
    assert [m.value() for m in consume_all(tansu, topic, [metadata[0].partition], 20)] == [
        b"%d" % i for i in range(20)
    ]
    with pytest.raises(PoolSettingsMismatchError, match="linger_ms"):
        KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, acks="all")
    time.sleep(IDLE_EXIT_MS / 1000 + 1.5)  # longer than an app-started Sender stays idle
    assert sidecar.poll() is None and SharedPool.exists(pool_name)


def test_a_confluent_sidecar_and_a_refused_pool(tansu: Peer, pool_name: str) -> None:
    command = [SHMKAFKA, "sender", "--pool", pool_name, "--create", "--api", "confluent",
               "--bootstrap-server", tansu.bootstrap,
               "--producer-property", "linger.ms=20"]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not (SharedPool.exists(pool_name) and pool_stat(pool_name)["sender"]["alive"]):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        topic = unique_topic("sidecar")
        producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 20,
                             "shmkafka.pool": pool_name})  # fmt: skip
        reports: list[int] = []
        producer.produce(topic, b"v", b"k", on_delivery=lambda e, m: reports.append(m.offset()))
        assert producer.flush(30) == 0 and reports == [0]
        producer.close()
        again = subprocess.run(
            [*command[:-1], "linger.ms=99"], capture_output=True, text=True, timeout=60
        )  # another sidecar, other settings: refused, the pool left as it is
        assert again.returncode == 2 and "exists with other settings" in again.stderr
        assert "Traceback" not in again.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
