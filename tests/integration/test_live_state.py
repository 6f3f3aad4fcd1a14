"""Live state: the pool's metrics (pool/metrics.py), ``shmkafka stat --watch`` and the
Prometheus exporter, checked against what was really sent (to Tansu, read back) and what
really failed (records that expire with no broker)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shmkafka import KafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.cli.exporter import prometheus_name
from shmkafka.pool.metrics import METRICS, PoolWatcher
from shmkafka.protocol.error_codes import ErrorCode
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")
SHMKAFKA = os.path.join(os.path.dirname(sys.executable), "shmkafka")
BUFFER = 4 * 1024 * 1024
TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
NOT_ENOUGH_REPLICAS = int(ErrorCode.NOT_ENOUGH_REPLICAS)


def _producer(bootstrap: str, pool: str, **extra: object) -> KafkaProducer:
    settings: dict[str, object] = {"linger_ms": 5, "buffer_memory": BUFFER, **extra}
    return KafkaProducer(bootstrap_servers=bootstrap, pool=pool, **settings)


def _send(producer: KafkaProducer, topic: str, count: int, start: int = 0) -> None:
    futures = [producer.send(topic, f"{start + i}".encode()) for i in range(count)]
    for future in futures:
        future.get(30)


def _watch(pool: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SHMKAFKA, "stat", "--watch", "--pool", pool, *extra],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_metrics_count_what_was_sent_and_read_back(tansu: Peer, pool_name: str) -> None:
    topic = unique_topic("metrics")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 2)
    producer = _producer(tansu.bootstrap, pool_name)
    try:
        _send(producer, topic, 500)
        watcher = PoolWatcher(pool_name)
        try:
            first = watcher.sample()[pool_name]
            _send(producer, topic, 300, start=500)
            second = watcher.sample()[pool_name]
        finally:
            watcher.close()
        from_api = producer.metrics()["producer-metrics"]
    finally:
        producer.close()
    assert first["record-send-total"] == 500 and second["record-send-total"] == 800
    assert second["record-send-rate"] > 0 and second["request-rate"] > 0
    assert second["records-per-request-avg"] > 0
    assert second["record-error-total"] == 0 and second["record-error-rate"] == 0
    assert second["buffer-total-bytes"] == BUFFER
    assert second["buffer-available-bytes"] == BUFFER  # everything acknowledged: all free
    assert second["records-queued"] == 0 and second["batches-in-flight"] == 0
    assert second["producer-processes"] == 1 and second["sender-up"] == 1
    assert second["connection-count"] >= 1 and second["sender-cpu-seconds-total"] > 0
    assert second["outgoing-byte-total"] > 800 and second["incoming-byte-total"] > 0
    assert set(second) == {m.name for m in METRICS}
    assert from_api["record-send-total"] == 800 and from_api["records-pending"] == 0
    assert len(consume_all(tansu, topic, [0, 1], 800)) == 800


def test_failed_and_retried_records_are_counted(pool_name: str) -> None:
    """broker_stub fails one produce for good (TOPIC_AUTHORIZATION_FAILED) and one for a
    retry (NOT_ENOUGH_REPLICAS): the metrics count their records, not their batches."""
    with BrokerStub(nodes=1, partitions=1) as stub:
        stub.control("fail_produce", code=TOPIC_AUTHORIZATION_FAILED, count=1, topic="denied")
        stub.control("fail_produce", code=NOT_ENOUGH_REPLICAS, count=1, topic="retried")
        stub.run(lambda: stub.faults.latency_ms.update({None: 50}))  # every response
        producer = _producer(stub.bootstrap, pool_name, linger_ms=1000)
        watcher = PoolWatcher(pool_name)
        try:
            denied = [producer.send("denied", b"%d" % i) for i in range(7)]
            producer.flush(30)  # one batch of 7
            retried = [producer.send("retried", b"%d" % i) for i in range(5)]
            producer.flush(30)  # one batch of 5, sent twice
            watcher.sample()  # the window starts: only produce requests from here on
            for _ in range(3):
                producer.send("retried", b"later")
                producer.flush(30)
            values = watcher.sample()[pool_name]
        finally:
            watcher.close()
            producer.close(timeout=5)
    assert [_failed(f) for f in denied] == [True] * 7
    assert [_failed(f) for f in retried] == [False] * 5
    assert values["record-error-total"] == 7 and values["record-retry-total"] == 5
    assert values["record-send-total"] == 7 + 5 + 5 + 3  # each send of a batch counts
    assert values["record-send-rate"] > 0 and values["request-rate"] > 0
    assert 50 <= values["request-latency-avg"] < 1000  # every response was 50 ms late


def _failed(future: object) -> bool:
    try:
        future.get(20)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 (any failure of the record)
        return True
    return False


@pytest.fixture
def sending(tansu: Peer, pool_name: str) -> Iterator[tuple[KafkaProducer, str, list[int]]]:
    """A producer that sends steadily from a thread until the test ends."""
    topic = unique_topic("watch")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    producer = _producer(tansu.bootstrap, pool_name)
    sent, stop = [0], threading.Event()

    def loop() -> None:
        while not stop.is_set():
            _send(producer, topic, 200, start=sent[0])
            sent[0] += 200

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield producer, topic, sent
    finally:
        stop.set()
        thread.join(30)
        producer.close()


def test_stat_watch_shows_live_rates(sending: tuple[KafkaProducer, str, list[int]],
                                     pool_name: str) -> None:  # fmt: skip
    _, _, sent = sending
    deadline = time.monotonic() + 30
    while sent[0] < 200 and time.monotonic() < deadline:  # (the Sender is up and sending)
        time.sleep(0.01)
    done = _watch(pool_name, "--interval", "0.5", "--count", "3", "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 3 and {r["pool"] for r in rows} == {pool_name}
    totals = [r["record-send-total"] for r in rows]
    # a rate where records went out in the interval (a loaded machine may stall one)
    assert any(r["record-send-rate"] > 0 for r in rows)
    for before, after, row in zip(totals, totals[1:], rows[1:], strict=False):
        assert (row["record-send-rate"] > 0) == (after > before), rows
    assert totals == sorted(totals) and 0 < totals[-1] <= sent[0] + 200
    assert all(r["sender-up"] == 1 and r["producer-processes"] == 1 for r in rows)

    text = _watch(pool_name, "--interval", "0.3", "--count", "2")
    assert text.returncode == 0, text.stderr
    frames = text.stdout.strip().split("\n\n")
    assert len(frames) == 2 and "\x1b[" not in text.stdout  # not a terminal: no redraw codes
    for frame in frames:
        assert f"pool {pool_name}: Sender up" in frame
        assert "records/s" in frame and "bytes/s" in frame and "requests/s" in frame
        assert "errors" in frame and "queue" in frame and "buffer" in frame and "CPU" in frame


def test_stat_watch_of_a_missing_pool_is_one_line() -> None:
    done = _watch("no-such-pool-here", "--count", "1")
    assert done.returncode == 1
    assert done.stderr.startswith("shmkafka stat: no pool named 'no-such-pool-here'")
    assert len(done.stderr.strip().splitlines()) == 1


@contextlib.contextmanager
def _exporter(*extra: str) -> Iterator[str]:
    """``shmkafka exporter`` on a free loopback port; yields its URL."""
    command = [SHMKAFKA, "exporter", "--port", "0", "--interval", "0.2", "--window", "5",
               *extra]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:  # fmt: skip
        try:
            assert process.stdout is not None and process.stderr is not None
            line = process.stdout.readline()
            assert line.startswith("shmkafka exporter: serving http://127.0.0.1:"), (
                line + process.stderr.read()
            )
            yield line.split()[-1]
            assert process.poll() is None, process.stderr.read()  # still serving
        finally:
            process.terminate()
            assert process.wait(10) == 0


@pytest.fixture
def exporter() -> Iterator[str]:
    """The exporter of every pool of this user (on 127.0.0.1, its default address)."""
    with _exporter() as url:
        yield url


def _scrape(url: str, pool: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("pool") == pool
    }


def _scrape_until(url: str, pool: str, wanted: dict[str, float]) -> dict[str, float]:
    """Scrape until every name of ``wanted`` has its value (the exporter samples every 0.2 s;
    the Sender counts a batch's records before it frees the batch's blocks, so one sample can
    show the records counted and a block not yet free)."""
    deadline = time.monotonic() + 10
    while True:
        got = _scrape(url, pool)
        if all(got.get(n) == v for n, v in wanted.items()) or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_exporter_serves_kafka_metrics_to_prometheus(
    exporter: str, tansu: Peer, pool_name: str
) -> None:
    got = _send_and_scrape(exporter, tansu, pool_name, 400)
    names = {prometheus_name(m) + ("_total" if m.kind == "counter" else "") for m in METRICS}
    assert names <= set(got), names - set(got)
    assert got["kafka_producer_record_send_total"] == 400
    assert got["kafka_producer_record_send_rate"] > 0
    assert got["kafka_producer_request_total"] >= 1
    assert got["kafka_producer_record_error_total"] == 0
    assert got["kafka_producer_buffer_total_bytes"] == BUFFER
    assert got["kafka_producer_buffer_available_bytes"] == BUFFER
    assert got["shmkafka_sender_up"] == 1 and got["shmkafka_producer_processes"] == 1
    # The producer closed: its Sender removes the pool, and the pool leaves the scrape.
    deadline = time.monotonic() + 15
    while _scrape(exporter, pool_name):
        assert time.monotonic() < deadline, "the removed pool is still exported"
        time.sleep(0.1)


def test_exporter_without_prometheus_client_says_what_to_install(tmp_path: object) -> None:
    blocker = f"{tmp_path}/prometheus_client.py"
    with open(blocker, "w") as f:
        f.write("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([SHMKAFKA, "exporter", "--port", "0"], capture_output=True, text=True,
                          timeout=30, env=env)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "shmkafka exporter: needs prometheus-client (pip install 'shmkafka[metrics]')"
    )


def test_exporter_of_a_pool_that_comes_later(tansu: Peer, pool_name: str) -> None:
    """``--pool`` names a pool that does not exist yet: served empty, then with it."""
    with _exporter("--pool", pool_name) as url:
        assert _scrape(url, pool_name) == {}
        got = _send_and_scrape(url, tansu, pool_name, 50)
        assert got["kafka_producer_record_send_total"] == 50


def _send_and_scrape(url: str, tansu: Peer, pool: str, count: int) -> dict[str, float]:
    """Send ``count`` records to a new topic, scrape until they are counted, and read them
    back."""
    topic = unique_topic("exporter")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    producer = _producer(tansu.bootstrap, pool)
    try:
        _send(producer, topic, count)
        got = _scrape_until(
            url,
            pool,
            {
                "kafka_producer_record_send_total": count,
                "kafka_producer_buffer_available_bytes": BUFFER,
            },
        )
    finally:
        producer.close()
    assert len(consume_all(tansu, topic, [0], count)) == count
    return got
