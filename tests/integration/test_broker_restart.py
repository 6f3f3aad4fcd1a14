"""Tansu stops mid-run and starts again on the same port (its in-memory log is gone): the
producer recovers — new producer id, sequences from 0 — new records flow, and every future
completes, with success or a timeout error, within delivery.timeout.ms. None hangs."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time

import confluent_kafka
import pytest

from shmkafka.perf.brokers import free_port, run_tansu
from tests.integration import e2e_workers
from tests.integration.kafka_io import cluster, consume_all
from tests.peers import Peer
from tests.wire import WireClient

pytestmark = pytest.mark.integration


def _high_watermark(peer: Peer, topic: str) -> int:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": peer.bootstrap, "group.id": "watermark", "log_level": 3}
    )
    try:
        high: int = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=10
        )[1]
        return high
    finally:
        consumer.close()


def _peer(port: int) -> Peer:
    deadline = time.monotonic() + 30
    while True:
        try:
            WireClient("127.0.0.1", port, timeout=2).close()
            return Peer("tansu", (("127.0.0.1", port),), can_create_topics=True, auto_partitions=1)
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_broker_restart_on_the_same_port(pool_name: str) -> None:
    port = free_port()
    topic = "restart-topic"
    delivery_timeout_ms = 15_000
    config = {
        "bootstrap_servers": [f"127.0.0.1:{port}"],
        "delivery_timeout_ms": delivery_timeout_ms,
        "request_timeout_ms": 3000,
        "retry_backoff_max_ms": 500,
        "reconnect_backoff_max_ms": 300,
        "metadata_max_age_ms": 1000,
    }
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    app = ctx.Process(
        target=e2e_workers.produce_through_restart, args=(pool_name, config, topic, 6000, 6.0, out)
    )
    with contextlib.ExitStack() as first:
        broker = first.enter_context(run_tansu(port))
        with cluster(_peer(port)) as c:
            c.ensure_topic(topic, 1)
        app.start()
        time.sleep(2.0)
        # stopped at once (a crash): Tansu's own shutdown keeps serving its open connections
        os.kill(broker.pid, signal.SIGKILL)
    time.sleep(1.0)  # the broker is down
    with run_tansu(port):
        peer = _peer(port)
        result = out.get(timeout=delivery_timeout_ms / 1000 + 60)
        app.join(30)
        assert app.exitcode == 0
        assert result["pending"] == 0  # none hangs
        assert result["other"] == []  # success or a timeout error, nothing else
        assert result["flush_s"] < delivery_timeout_ms / 1000 + 5
        ok = set(result["ok"])
        assert len(ok) + result["timeouts"] == 6000
        after = consume_all(peer, topic, [0], 1, timeout=20)
        assert after, "records flow again after the restart"
        seqs = [
            int(m.value().split(b":")[1])
            # (up to the high watermark: the restarted log may hold fewer than were acked)
            for m in consume_all(peer, topic, [0], _high_watermark(peer, topic), timeout=20)
        ]
        assert set(seqs) <= ok and len(seqs) == len(
            set(seqs)
        )  # what the new log holds was acked once
        assert max(seqs) > 3000  # records sent after the restart were delivered
