"""``shmkafka produce``: lines from stdin to a topic as kafka-console-producer sends them,
with keys parsed at a separator; a bad line or bad settings end it in one line (no
traceback). Read back with confluent-kafka's consumer, on Tansu."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")
SHMKAFKA = os.path.join(os.path.dirname(sys.executable), "shmkafka")


def _produce(tansu: Peer, topic: str, lines: str, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [SHMKAFKA, "produce", "--bootstrap-server", tansu.bootstrap, "--topic", topic,
               *extra]  # fmt: skip
    return subprocess.run(command, input=lines, capture_output=True, text=True, timeout=120)


def test_lines_become_records_with_their_keys(tansu: Peer, pool_name: str, tmp_path: Path) -> None:
    topic = unique_topic("console")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    config = tmp_path / "producer.properties"
    config.write_text(f"# Kafka's names\nlinger.ms=5\nshmkafka.pool={pool_name}\n")
    lines = "k1:first\nk2:second:with:colons\n:no key\n"
    done = _produce(tansu, topic, lines, "--property", "parse.key=true",
                    "--property", "key.separator=:", "--producer.config", str(config),
                    "--producer-property", "acks=all")  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = [(m.key(), m.value()) for m in consume_all(tansu, topic, [0], 3)]
    assert got == [(b"k1", b"first"), (b"k2", b"second:with:colons"), (b"", b"no key")]


def test_plain_lines_and_the_errors_a_user_makes(tansu: Peer, pool_name: str) -> None:
    topic = unique_topic("console")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    pool = ["--producer-property", f"shmkafka.pool={pool_name}"]
    done = _produce(tansu, topic, "one\ntwo\n", *pool)
    assert done.returncode == 0, done.stderr
    assert [(m.key(), m.value()) for m in consume_all(tansu, topic, [0], 2)] == [
        (None, b"one"),
        (None, b"two"),
    ]
    bad_line = _produce(tansu, topic, "no separator here\n", *pool, "--property", "parse.key=true")
    assert bad_line.returncode == 1 and "no key separator '\\t' on line 1" in bad_line.stderr
    bad_setting = _produce(tansu, topic, "x\n", *pool, "--producer-property", "linger.ms=oops")
    assert bad_setting.returncode == 2  # librdkafka's words name linger.ms's canonical name
    assert 'Invalid value for configuration property "queue.buffering.max.ms"' in (
        bad_setting.stderr
    )
    unknown = _produce(tansu, topic, "x\n", *pool, "--property", "parse.keys=true")
    assert unknown.returncode == 2 and "unknown --property parse.keys" in unknown.stderr
    for result in (bad_line, bad_setting, unknown):
        assert "Traceback" not in result.stderr
