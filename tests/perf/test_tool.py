"""``shmkafka perf``: the workload is the same for every client, and a small real run on the
embedded broker_stub measures every client it was asked to compare."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

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
