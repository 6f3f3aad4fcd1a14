"""``shmkafka perf``'s workload without a broker: what each client is given (its own defaults
unless told), the sweep's lists, the realistic values, the pacing and the summaries."""

from __future__ import annotations

import json
import socket
import time
from types import SimpleNamespace
from typing import Any

import lz4.frame
import pytest
from kafka import KafkaProducer as PeerKafkaProducer

from shmkafka.perf import clients, report
from shmkafka.perf.pacing import LATENCY_SAMPLES, MAX_AHEAD_S, Pacer
from shmkafka.perf.tool import build_parser, sweep, workload_of
from shmkafka.perf.values import values_for
from shmkafka.perf.workload import Workload

BATCH_KEYS = {
    "shmkafka": ("batch_size", "buffer_memory", "max_in_flight_requests_per_connection"),
    "kafka-python": ("batch_size", "buffer_memory", "max_in_flight_requests_per_connection"),
    "confluent-kafka": ("batch.size", "queue.buffering.max.kbytes", "max.in.flight"),
    "shmkafka-confluent": ("batch.size", "queue.buffering.max.kbytes", "max.in.flight"),
}


def configs(work: Workload) -> dict[str, dict[str, Any]]:
    return {
        "shmkafka": clients.shmkafka_config("h:1", work, "pool"),
        "kafka-python": clients.kafka_python_config("h:1", work),
        "confluent-kafka": clients.confluent_config("h:1", work),
        "shmkafka-confluent": clients.shmkafka_confluent_config("h:1", work, "pool"),
    }


def test_by_default_no_client_is_given_a_batch_size_buffer_or_in_flight_limit() -> None:
    work = workload_of(build_parser().parse_args([]))
    assert (work.batch_size, work.buffer_memory, work.max_in_flight) == (None, None, None)
    for client, conf in configs(work).items():
        assert not set(BATCH_KEYS[client]) & set(conf), client
    # the workload's own settings reach every client
    conf = configs(work)
    assert conf["shmkafka"]["compression_type"] == conf["kafka-python"]["compression_type"]
    assert conf["confluent-kafka"]["compression.type"] == "lz4"
    assert conf["confluent-kafka"]["linger.ms"] == conf["shmkafka"]["linger_ms"] == 5
    assert conf["shmkafka-confluent"]["shmkafka.pool"] == "pool"
    assert "batch: each client's default" in work.describe()


def test_settings_the_user_gives_reach_every_client() -> None:
    argv = ["--batch-size", "65536", "--buffer-memory", "67108864", "--max-in-flight", "3"]
    work = workload_of(build_parser().parse_args(argv))
    memory_given = {"shmkafka": 64 << 20, "confluent-kafka": 64 << 10,  # (kbytes)
                    "shmkafka-confluent": 64 << 10}  # fmt: skip
    for client, conf in configs(work).items():
        batch, memory, in_flight = BATCH_KEYS[client]
        assert conf[batch] == 65536 and conf[in_flight] == 3, client
        if client == "kafka-python":  # kafka-python 3 has no bound: it is not given one
            assert (memory in conf) == (memory in PeerKafkaProducer.DEFAULT_CONFIG)
        else:
            assert conf[memory] == memory_given[client], client
    assert "batch: 65536" in work.describe()


def test_record_sizes_and_processes_are_comma_lists_swept_size_by_size() -> None:
    parse = build_parser().parse_args
    args = parse(["--record-size", "100,1000,10000,100000", "--processes", "1,4"])
    assert args.record_size == [100, 1000, 10000, 100000] and args.processes == [1, 4]
    points = sweep(workload_of(args), args)
    assert [(w.record_size, w.processes) for w in points] == [
        (100, 1), (100, 4), (1000, 1), (1000, 4), (10000, 1), (10000, 4), (100000, 1),
        (100000, 4),
    ]  # fmt: skip
    assert parse([]).record_size == [100] and parse([]).processes == [4]
    for bad in (
        ["--record-size", "100,x"],
        ["--processes", "0,2"],
        ["--record-size", ","],
        ["--records", "5", "--duration", "1"],
        ["--fleet", "5", "--throughput", "9"],
    ):
        with pytest.raises(SystemExit):
            parse(bad)  # fmt: skip


def test_megabytes_are_split_among_the_processes_at_every_size() -> None:
    args = build_parser().parse_args(["--record-size", "100,100000", "-p", "3", "--megabytes", "3"])
    small, large = sweep(workload_of(args), args)
    assert (small.records, large.records) == (10_000, 10)  # 3 MB / size / 3 processes
    assert small.duration_s is None and large.duration_s is None


def test_a_fleet_runs_for_10_seconds_unless_told_otherwise() -> None:
    parse = build_parser().parse_args
    fleet = workload_of(parse(["--fleet", "500"]))
    assert fleet.duration_s == 10.0 and fleet.per_process_rate() == 500
    assert workload_of(parse(["--fleet", "500", "--records", "7"])).duration_s is None
    assert workload_of(parse([])).duration_s is None  # without a fleet: 100,000 records


def test_realistic_values_are_deterministic_json_like_and_moderately_compressible() -> None:
    values = values_for(1, 0, 1000)
    assert values == values_for(1, 0, 1000)
    assert values != values_for(1, 1, 1000) and values != values_for(2, 0, 1000)
    assert len(set(values)) == len(values) and {len(v) for v in values} == {1000}
    for value in values[:50]:
        doc = json.loads(value)
        assert isinstance(doc, dict) and {"id", "user", "text"} <= set(doc)
    assert {len(v) for v in values_for(1, 0, 7)} == {7}  # too small for an object
    assert all(isinstance(json.loads(v), dict) for v in values_for(1, 0, 40)[:20])
    blob = b"".join(values)[: 256 * 1024]
    assert 1.5 < len(blob) / len(lz4.frame.compress(blob)) < 4
    work = Workload(record_size=1000)
    copies = b"".join(work.values(0) * 256)
    assert len(copies) / len(lz4.frame.compress(copies)) > 20  # the compressible kind
    realistic = Workload(record_size=1000, value_kind="realistic")
    assert realistic.values(3) == values_for(1, 3, 1000)


def test_the_pacer_hands_out_every_record_and_samples_about_the_target() -> None:
    progress = SimpleNamespace(value=0)
    pacer = Pacer(Workload(records=10_000, record_size=100), progress)
    chunks, samples = [], 0
    for n in pacer:
        chunks.append(n)
        samples += pacer.sample
    assert sum(chunks) == pacer.sent == 10_000 and samples == LATENCY_SAMPLES
    big = Pacer(Workload(records=50, record_size=100_000), progress)
    assert list(big) == [1] * 50  # 100 KB records: the stop condition is checked each time


def test_a_paced_pacer_waits_for_each_record_when_it_is_due() -> None:
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    pacer = Pacer(Workload(records=40, fleet_rate=400), SimpleNamespace(value=0), wait)
    start = time.monotonic()
    assert list(pacer) == [1] * 40  # 400/s: one record per chunk
    # the 40th record is due 39/400 s in, and may be handed out up to MAX_AHEAD_S early
    assert time.monotonic() - start >= 39 / 400 - MAX_AHEAD_S
    assert waits and max(waits) <= 1 / 400 + 0.001


def test_connections_counts_the_established_tcp_connections_to_the_ports() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert clients.connections(None, frozenset({port})) == 0
        with socket.create_connection(("127.0.0.1", port)) as conn:
            accepted, _ = server.accept()
            with accepted:
                assert clients.connections(None, frozenset({port})) == 1
                assert clients.connections(None, frozenset({port + 1})) == 0
                assert conn.fileno() >= 0
    assert clients.broker_ports(f"127.0.0.1:{port},other:9093,bare") == {port, 9093, 9092}


def _result(client: str, rate: float, host: float, pss: float, conns: int) -> dict[str, Any]:
    return {"client": client, "record_size": 100, "processes": 2, "records_per_s": rate,
            "cpu_s": {"host": host}, "pss_mb": pss, "connections": conns}  # fmt: skip


def test_the_summary_gives_each_shmkafka_client_against_each_peer() -> None:
    results = [
        _result("shmkafka", 400, 1.0, 100, 1), _result("shmkafka-confluent", 200, 2.0, 100, 1),
        _result("kafka-python", 100, 4.0, 50, 2), _result("confluent-kafka", 400, 4.0, 200, 4),
    ]  # fmt: skip
    assert report.summary_lines(results) == [
        "summary P=2: shmkafka = 4.00x kafka-python, 1.00x confluent-kafka",
        "summary P=2: shmkafka-confluent = 2.00x kafka-python, 0.50x confluent-kafka",
    ]
    fleet = report.summary_lines(results, fleet=True)
    assert fleet[0] == (
        "fleet P=2: shmkafka: host CPU 0.25x kafka-python, 0.25x confluent-kafka; "
        "PSS 2.00x kafka-python, 0.50x confluent-kafka; "
        "connections 1 (kafka-python 2, confluent-kafka 4)"
    )
    assert fleet[1].startswith("fleet P=2: shmkafka-confluent: host CPU 0.50x kafka-python")
