"""``shmkafka perf``: the workload is the same for every client, and a small real run on the
embedded broker_stub measures every client it was asked to compare."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.perf import tool
from shmkafka.perf.tool import main
from shmkafka.perf.workload import Workload


def test_keys_are_deterministic_per_process_and_zipf_is_skewed() -> None:
    work = Workload(keys="uniform", key_count=100)
    first = list(itertools.islice(work.keys_for(0), 50))
    assert first == list(itertools.islice(work.keys_for(0), 50))
    assert first != list(itertools.islice(work.keys_for(1), 50))
    zipf = Counter(itertools.islice(Workload(keys="zipf", key_count=100).keys_for(0), 5000))
    assert zipf.most_common(1)[0][0] == b"key-00000000"
    assert zipf[b"key-00000000"] > 5 * zipf[b"key-00000050"]
    assert set(itertools.islice(Workload(keys="none").keys_for(0), 3)) == {None}
    with pytest.raises(ValueError, match="idempotence needs acks=all"):
        Workload(idempotence=True, acks="1")


def test_a_small_run_compares_the_clients(tmp_path: Path) -> None:
    out = tmp_path / "perf.json"
    argv = [
        "--processes", "2", "--records", "3000", "--warmup", "100", "--partitions", "4",
        "--compare", "confluent-kafka", "--json", str(out), "--quiet",
        "--throughput", "20000",
    ]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["broker"] == "broker_stub"
    results = {r["client"]: r for r in report["results"]}
    assert set(results) == {"shmkafka", "confluent-kafka"}
    for r in results.values():
        assert r["records"] == 6000 and r["errors"] == 0
        assert r["seconds"] >= 6000 / 20000 * 0.9  # the throughput cap held
        assert r["records_per_s"] <= 20000 * 1.1
        assert r["latency_ms"]["samples"] > 0 and r["latency_ms"]["p50"] > 0
        assert r["produce_requests"] > 0 and r["wire_bytes"] > 0 and r["peak_rss_mb"] > 0
    assert results["shmkafka"]["cpu_s"]["sender"] > 0
    # each client at its own batch size: the workers gave none
    assert "batch_size" not in results["shmkafka"]["config"]
    assert "batch.size" not in results["confluent-kafka"]["config"]
    assert "max.in.flight" not in results["confluent-kafka"]["config"]


@pytest.fixture
def stub() -> Iterator[BrokerStub]:
    """A broker_stub that creates no topic by itself: a topic there was created by the run
    (and a late metadata request of a producer cannot bring a deleted one back)."""
    with BrokerStub(nodes=1, auto_create_topics=False) as cluster:
        yield cluster


def _topics(stub: BrokerStub) -> dict[str, int]:
    return stub.run(lambda: {name: len(parts) for name, parts in stub.cluster.topics.items()})


SMALL_RUN = ["--processes", "1", "--records", "200", "--warmup", "10", "--partitions", "3",
             "--quiet"]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "left"),
    [
        ([], {}),  # the run's fresh topic is deleted
        (["--keep-topics"], {"perf-shmkafka-*": 3}),  # ... or kept
        (["--topic", "mine"], {"mine": 3}),  # a topic the user named is never deleted
    ],
)
def test_a_run_deletes_the_topic_it_created(
    stub: BrokerStub, extra: list[str], left: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SMALL_RUN, "--bootstrap", stub.bootstrap, *extra]) == 0
    topics = _topics(stub)
    assert {("perf-shmkafka-*" if n.startswith("perf-shmkafka-") else n): c
            for n, c in topics.items()} == left  # fmt: skip
    assert "could not delete" not in capsys.readouterr().err


def test_a_failed_run_deletes_its_topic_too(
    stub: BrokerStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def failing_run(client: str, bootstrap: str, broker_pid: int | None, work: Workload,
                    quiet: bool) -> dict[str, Any]:  # fmt: skip
        seen.append(work.topic)
        assert _topics(stub) == {work.topic: 3}  # created before the run
        raise RuntimeError("the run failed")

    monkeypatch.setattr(tool, "_run_processes", failing_run)
    with pytest.raises(RuntimeError, match="the run failed"):
        main([*SMALL_RUN, "--bootstrap", stub.bootstrap])
    assert len(seen) == 1 and seen[0].startswith("perf-shmkafka-")
    assert _topics(stub) == {}


def test_a_fleet_paces_every_process_and_counts_its_connections(
    stub: BrokerStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fleet.json"
    argv = [
        "--bootstrap", stub.bootstrap, "--fleet", "200", "--records", "100", "--processes", "3",
        "--record-size", "200", "--value-kind", "realistic", "--warmup", "10",
        "--partitions", "3", "--clients", "shmkafka,shmkafka-confluent,confluent-kafka",
        "--json", str(out), "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    results = {r["client"]: r for r in json.loads(out.read_text())["results"]}
    assert list(results) == ["shmkafka", "shmkafka-confluent", "confluent-kafka"]
    for r in results.values():
        assert r["records"] == 300 and r["errors"] == 0  # every record, every report
        assert r["seconds"] >= 99 / 200  # no process ran ahead of 200 records/s
        assert r["rate_per_process"] == 200 and r["record_size"] == 200
        assert r["latency_ms"]["samples"] > 0 and r["cpu_s"]["host"] > 0
        assert r["pss_mb"] > 0
    # one connection at least per confluent-kafka process; shmkafka's go through its Sender
    assert results["confluent-kafka"]["connections"] >= 3
    assert results["shmkafka"]["connections"] >= 1
    assert results["shmkafka-confluent"]["connections"] >= 1
    printed = capsys.readouterr().out
    assert "conns" in printed and "fleet P=3: shmkafka: host CPU" in printed
    assert "200-byte realistic values" in printed


def test_a_run_that_leaves_records_without_a_result_fails_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo fails (non-zero) when a client left records without a result, and names
    them: how many, and how long its bounded flush waited."""
    real = tool.run_client

    def leaves_two(*args: Any, **kwargs: Any) -> dict[str, Any]:
        result = real(*args, **kwargs)
        return {**result, "unresolved": 2, "flush_s": 130.0}

    monkeypatch.setattr(tool, "run_client", leaves_two)
    assert main(SMALL_RUN) == 1
    assert "UNRESOLVED shmkafka P=1 100 B: 2 records without a result after a flush of " \
           "130.0 s" in capsys.readouterr().err  # fmt: skip


def test_a_worker_that_died_without_a_report_is_a_failure_not_a_wait() -> None:
    class Dead:
        exitcode = -9

    out: Any = __import__("queue").Queue()
    results = tool._collect(out, [Dead()], Workload(processes=1), [], "shmkafka", True)
    assert results == [{"error": "a worker exited with status -9"}]


def test_pool_durability_runs_shmkafka_once_per_mode_and_counts_its_msyncs(
    stub: BrokerStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "perf.json"
    argv = [*SMALL_RUN, "--bootstrap", stub.bootstrap, "--acks", "all", "--idempotence",
            "--pool-durability", "memory,sync", "--pool-dir", str(tmp_path),
            "--compare", "confluent-kafka", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    results = {(r["client"], r["durability"]): r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {("shmkafka", None), ("shmkafka", "sync"), ("confluent-kafka", None)}
    memory, sync = results[("shmkafka", None)], results[("shmkafka", "sync")]
    assert memory["commits"] == 0 and memory["records_per_commit"] is None
    # a sync send returns once a commit covers it: at least one msync per record of P=1
    assert sync["records"] == 200 and sync["commits"] >= 200 and sync["records_per_commit"] <= 1
    assert sync["config"]["pool_durability"] == "sync"
    printed = capsys.readouterr().out
    assert "shmkafka/sync" in printed and "records per msync" in printed
    with pytest.raises(SystemExit):  # (a durable pool without idempotence: refused)
        main([*SMALL_RUN, "--bootstrap", stub.bootstrap, "--pool-durability", "flush"])
