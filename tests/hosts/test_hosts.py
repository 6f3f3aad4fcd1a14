"""The many-host run, short: two hosts made by the kernel, each with its own /dev/shm,
pools and Senders, producing to one 3-node cluster through iptables faults, every record
checked by the soak's history checker. ``make soak-hosts`` runs it; it needs root."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts.harness import FAULTS, HostsOptions, HostsRun
from tests.hosts.lab import NetLab
from tests.soak.figures import DEFECTS

pytestmark = pytest.mark.hosts


def test_hosts_through_kernel_faults_lose_duplicate_reorder_and_hang_nothing(
    tmp_path: Path,
) -> None:
    with NetLab() as lab:  # (LabUnavailable fails the test: it never passes silently)
        report = HostsRun(HostsOptions(directory=str(tmp_path / "hosts")), lab).run()
    counts = report["counts"]
    assert {k: counts[k] for k in DEFECTS} == dict.fromkeys(DEFECTS, 0), report["examples"]
    for kind in ("resolved_twice", "ack_mismatch"):
        assert counts[kind] == 0, (kind, report["examples"].get(kind))
    assert report["caught_up"]
    assert all(code == 0 for code in report["exits"].values()), report["exits"]
    assert counts["acknowledged"] > 0 and counts["read_back"] >= counts["acknowledged"]
    assert set(report["faults"]) <= set(FAULTS) and sum(report["faults"].values()) > 0
    assert set(report["acked_per_host"]) == {"h0", "h1"}, report["acked_per_host"]
    assert report["timeline"]["acked_logged"] == counts["acknowledged"]
    # The brokers see each host's Senders only (one per pool: here one per API), each with a
    # connection per node and at most one per bootstrap address (its first metadata and
    # producer id requests); the app processes hold none, however many there are.
    for connections in report["connections"].values():
        assert connections.get("apps", 0) == 0, report["connections"]
        senders = connections["sender_processes"]
        assert 0 < connections["senders"] <= senders * (3 + 3), report["connections"]
