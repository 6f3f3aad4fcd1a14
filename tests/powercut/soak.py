"""The long power-cut run (``make soak-power``): hundreds of cuts per mode, against Tansu,
with the checker of harness.py after each mode's run. Prints the counts by mode; exits 1 if
the checker found anything.

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
from tests.peers import run_tansu
from tests.powercut import harness
from tests.powercut.host import check_available


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cuts", type=int, default=150, help="cuts per mode")
    parser.add_argument("--modes", nargs="+", default=["sync", "flush"])
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    check_available()
    seed = args.seed if args.seed is not None else uuid.uuid4().int % 1_000_000
    failed = False
    with run_tansu() as tansu:
        for mode in args.modes:
            topic = unique_topic(f"soak-power-{mode}")
            with cluster(tansu) as c:
                c.ensure_topic(topic, 3)
            start = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="soak-power-") as root:
                outcome = harness.run(tansu.bootstrap, topic, Path(root), mode, args.cuts, seed,
                                      "soakpower" + uuid.uuid4().hex[:8])  # fmt: skip
            took = time.monotonic() - start
            print(
                f"{mode}: {outcome.cuts} cuts in {took:.0f} s (seed {seed}); "
                f"{outcome.acknowledged} records acknowledged, {outcome.delivered} delivered "
                f"({outcome.unacknowledged_delivered} sent but not yet acknowledged at a cut), "
                f"{outcome.lost_in_window} lost inside the last flush window; "
                f"{outcome.pages_kept} dirty pages kept and {outcome.pages_dropped} dropped "
                f"by the cuts; problems: {len(outcome.problems)}",
                flush=True,
            )
            for problem in outcome.problems[:20]:
                print("  " + problem)
            failed |= bool(outcome.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
