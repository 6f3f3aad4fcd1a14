"""The soak's smoke run in ``make test``: the same harness as ``make soak`` (every API and
mode, every fault kind, the history checker), for about two minutes instead of thirty, at a
lower share of the peak so the tests beside it keep their pace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak.harness import DEFECTS, Options, Soak, required_faults
from tests.soak.nemesis import KINDS


@pytest.mark.early
def test_a_short_soak_under_every_fault_loses_duplicates_reorders_and_hangs_nothing(
    tmp_path: Path,
) -> None:
    options = Options(
        duration_s=60, calibrate_s=6, rate_fraction=0.3, fault_interval_s=(1.5, 3.0),
        min_faults=1, max_partitions=8, directory=str(tmp_path / "soak"),
    )  # fmt: skip
    report = Soak(options).run()
    counts = report["counts"]
    assert {k: counts[k] for k in DEFECTS} == dict.fromkeys(DEFECTS, 0), report["examples"]
    for kind in ("resolved_twice", "ack_mismatch", "txn_partial", "fire_and_forget_absent"):
        assert counts[kind] == 0, (kind, report["examples"].get(kind))
    assert report["caught_up"] and report["left_behind"] == []
    assert report["hung_processes"] == [] and report["failed_processes"] == []
    assert {k for k in KINDS if report["faults"].get(k, 0) < 1} == set()
    # the run did what it says: records of every worker acknowledged and read back
    assert counts["acknowledged"] > 0 and counts["read_back"] >= counts["acknowledged"]
    assert counts["txn_committed"] > 0 and counts["txn_aborted"] > 0
    assert report["passed"]


def test_the_faults_a_run_needs_scale_with_its_duration_unless_given() -> None:
    # the deck deals each kind once per round of len(KINDS) faults, a fault every 5.5 s on
    # average
    # (docs/reliability.md says 12 in 30 minutes, 4 in 10)
    assert len(KINDS) == 16
    assert required_faults(Options(duration_s=1800)) == 12
    assert required_faults(Options(duration_s=600)) == 4
    assert required_faults(Options(duration_s=10)) == 1
    assert required_faults(Options(duration_s=600, min_faults=9)) == 9
    # the topic grows from 4 to 24 partitions at most: 20 growths, however long the run
    assert required_faults(Options(duration_s=7200)) == 49
    assert required_faults(Options(duration_s=7200), "partitions_grow") == 20
    assert required_faults(Options(duration_s=600), "partitions_grow") == 4
