"""The long power-cut run (``make soak-power``): hundreds of cuts per mode, against Tansu,
in runs of ``--per-run`` cuts (each on a pool and topic of its own, so the read back and the
checker of harness.py stay small), the checker after each. Prints the counts by mode;
exits 1 if the checker found anything.

    python -m tests.powercut.soak --cuts 150 --modes sync flush
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.integration.kafka_io import cluster, unique_topic
from tests.peers import Peer, run_tansu
from tests.powercut import harness
from tests.powercut.host import check_available


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cuts", type=int, default=150, help="cuts per mode")
    parser.add_argument("--modes", nargs="+", default=["sync", "flush"])
    parser.add_argument("--per-run", type=int, default=15, help="cuts per pool and topic")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    check_available()
    seed = args.seed if args.seed is not None else uuid.uuid4().int % 1_000_000
    failed = False
    with run_tansu() as tansu:
        for mode in args.modes:
            total = harness.Outcome(mode)
            start = time.monotonic()
            for run in range(-(-args.cuts // args.per_run)):
                cuts = min(args.per_run, args.cuts - run * args.per_run)
                outcome = _run(tansu, mode, cuts, seed + run)
                for name in (
                    "cuts",
                    "acknowledged",
                    "delivered",
                    "lost_in_window",
                    "unacknowledged_delivered",
                    "pages_kept",
                    "pages_dropped",
                ):
                    setattr(total, name, getattr(total, name) + getattr(outcome, name))
                total.windows += outcome.windows
                total.problems += outcome.problems
                for problem in outcome.problems[:20]:
                    print(f"  {mode} seed {seed + run}: {problem}", flush=True)
            _report(total, time.monotonic() - start, seed)
            failed |= bool(total.problems)
    return 1 if failed else 0


def _run(tansu: Peer, mode: str, cuts: int, seed: int) -> harness.Outcome:
    topic = unique_topic(f"soak-power-{mode}")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 3)
    with tempfile.TemporaryDirectory(prefix="soak-power-") as root:
        return harness.run(tansu.bootstrap, topic, Path(root), mode, cuts, seed,
                           "soakpower" + uuid.uuid4().hex[:8])  # fmt: skip


def _report(outcome: harness.Outcome, took: float, seed: int) -> None:
    windows = sorted(outcome.windows)
    window = ""
    if outcome.mode == "flush" and windows:
        window = (f"; the flush windows: median {windows[len(windows) // 2] * 1000:.0f} ms, "
                  f"longest {windows[-1] * 1000:.0f} ms")  # fmt: skip
    print(
        f"{outcome.mode}: {outcome.cuts} cuts in {took:.0f} s (seeds from {seed}); "
        f"{outcome.acknowledged} records acknowledged, {outcome.delivered} delivered "
        f"({outcome.unacknowledged_delivered} sent but not yet acknowledged at a cut), "
        f"{outcome.lost_in_window} lost inside the last flush window{window}; "
        f"{outcome.pages_kept} dirty pages kept and {outcome.pages_dropped} dropped by the "
        f"cuts; problems: {len(outcome.problems)}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
