"""The many-host run, short: two hosts made by the kernel, each with its own /dev/shm, one
pool shared by the three APIs, and its own clock, producing to a 3-node cluster whose nodes
live in namespaces of their own, through the kernel's faults (netem's impairments on the
links, iptables cuts, a leader isolated from its followers, kills and stops), every record
checked by the soak's history checker. ``make soak-hosts`` runs the 30-minute one; it needs
root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hosts.faults import KINDS
from tests.hosts.harness import HostsOptions, HostsRun, problems
from tests.hosts.lab import NetLab

pytestmark = [pytest.mark.hosts, pytest.mark.early]

DURATION_S = float(os.environ.get("SHMKAFKA_HOSTS_DURATION_S", "75"))


def test_hosts_through_kernel_faults_lose_duplicate_reorder_and_hang_nothing(
    tmp_path: Path,
) -> None:
    with NetLab() as lab:  # (LabUnavailable fails the test: it never passes silently)
        options = HostsOptions(
            hosts=2, duration_s=DURATION_S, rate=40, fault_s=(2.0, 4.0),
            fault_interval_s=(1.0, 2.5), directory=str(tmp_path / "h"),
        )  # fmt: skip
        report = HostsRun(options, lab).run()
    counts = report["counts"]
    assert problems(report) == []
    assert counts["acknowledged"] > 0 and counts["read_back"] >= counts["acknowledged"]
    assert set(report["faults"]) <= set(KINDS) and sum(report["faults"].values()) >= 10
    assert set(report["acked_per_host"]) == {"h0", "h1"}, report["acked_per_host"]
    assert counts["txn_committed"] > 0 and counts["txn_aborted"] > 0
    # The brokers see each host's Senders only: the shared pool's one, with a connection per
    # node and at most one per bootstrap address, and a transactional id's own; the app
    # processes hold none, however many there are. (Any one sample may find a host's pool
    # Sender with none, the first one too: a fault of the nemesis cut it off, or killed it,
    # just then; so each host's pool Sender must be seen connected in some sample.)
    samples = report["connections"]
    for host in {h for sample in samples for h in sample}:
        assert any(s.get(host, {}).get("pool_sender", 0) > 0 for s in samples), samples
    for sample in report["connections"]:
        for connections in sample.values():
            assert connections.get("apps", 0) == 0, report["connections"]
            assert connections.get("pool_sender", 0) <= 3 + 3, report["connections"]
