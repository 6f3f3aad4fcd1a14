"""``python -m tests.hosts``: the many-host run (``make soak-hosts``); exit status 0 if it
passed: every record accounted for and every fault kind dealt ``--min-faults`` times."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tests.hosts.faults import KINDS
from tests.hosts.harness import HostsOptions, HostsRun, problems
from tests.hosts.lab import NetLab


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The figures docs/reliability.md gives, from a run's report."""
    most: dict[str, dict[str, int]] = {}
    for sample in report["connections"]:
        for host, by in sample.items():
            for holder, n in by.items():
                most.setdefault(host, {})[holder] = max(n, most.get(host, {}).get(holder, 0))
    t = report["timeline"]
    return {
        "records": {"acknowledged": report["counts"]["acknowledged"],
                    "read_back": report["counts"]["read_back"],
                    "per_host": report["acked_per_host"]},
        "defects": {k: report["counts"][k] for k in ("lost", "duplicated", "reordered",
                                                     "phantom", "hung", "resolved_twice",
                                                     "txn_partial")},
        "faults": report["faults"],
        "broker_errors_sent": report.get("broker_errors_sent"),
        "send_to_ack_ms": {"p50_outside": t["p50_ms_quiet"], "p99_outside": t["p99_ms_quiet"],
                           "p50_during": t["p50_ms_faults"], "p99_during": t["p99_ms_faults"]},
        "send_to_ack_ms_kafka_python_callbacks": {
            k: report["timeline_callbacks"][v] for k, v in (
                ("p50_outside", "p50_ms_quiet"), ("p99_outside", "p99_ms_quiet"),
                ("p50_during", "p50_ms_faults"), ("p99_during", "p99_ms_faults"))
        },
        "by_fault": {k: {"count": v["count"], "longest_gap_ms": v["longest_gap_ms"],
                         "max_recovery_ms": v["max_recovery_ms"],
                         "median_recovery_ms": v["median_recovery_ms"]}
                     for k, v in t["by_fault"].items()},
        "connections_per_host_most": most,
        "confluent_kafka_would_open_per_host": {h: 3 * by.get("processes", 0)
                                               for h, by in most.items()},
        "links": report["links"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.hosts")
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds of faults")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--workers-per-host", type=int, default=6)
    parser.add_argument("--rate", type=int, default=60, help="records/s per app process")
    parser.add_argument("--fault-interval", default="2,5", metavar="LOW,HIGH",
                        help="seconds between fault starts (random in the range)")  # fmt: skip
    parser.add_argument("--min-faults", type=int, default=10,
                        help="each kind at least this often, or the run fails")  # fmt: skip
    parser.add_argument("--seed", type=int)
    parser.add_argument("--dir", help="the run's directory (default: a new one in /tmp)")
    args = parser.parse_args(argv)
    low, high = (float(x) for x in args.fault_interval.split(","))
    options = HostsOptions(
        hosts=args.hosts, workers_per_host=args.workers_per_host, duration_s=args.duration,
        rate=args.rate, fault_interval_s=(low, high), seed=args.seed, directory=args.dir,
    )  # fmt: skip
    with NetLab() as lab:
        run = HostsRun(options, lab)
        print(f"hosts: seed {run.seed}, dir {run.dir}", flush=True)
        report = run.run()
    print(json.dumps(summary(report), indent=1))
    found = problems(report) + [f"{kind}: dealt {report['faults'].get(kind, 0)} times"
                                for kind in KINDS
                                if report["faults"].get(kind, 0) < args.min_faults]  # fmt: skip
    for problem in found:
        print("FAILED:", problem)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
