"""``python -m tests.soak``: the combined soak (``make soak``); exit status 0 if it passed."""

from __future__ import annotations

import argparse
import sys

from tests.soak.figures import print_report
from tests.soak.harness import Options, Soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak")
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds of faults")
    parser.add_argument("--security", choices=("plaintext", "sasl_ssl"), default="plaintext")
    parser.add_argument("--calibrate", type=float, default=15.0,
                        help="seconds unpaced first, to measure the peak")  # fmt: skip
    parser.add_argument("--rate-fraction", type=float, default=0.8)
    parser.add_argument("--fault-interval", default="3,8", metavar="LOW,HIGH",
                        help="seconds between fault starts (random in the range)")  # fmt: skip
    parser.add_argument("--min-faults", type=int,
                        help="each kind at least this often, or the run fails (default: 60%% "
                             "of what the deck deals each kind over the duration)")  # fmt: skip
    parser.add_argument("--record-size", type=int, default=200)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--dir", help="the run's directory (default: a new one in /tmp)")
    args = parser.parse_args(argv)
    low, high = (float(x) for x in args.fault_interval.split(","))
    options = Options(
        duration_s=args.duration, security=args.security, calibrate_s=args.calibrate,
        rate_fraction=args.rate_fraction, fault_interval_s=(low, high),
        min_faults=args.min_faults, record_size=args.record_size, seed=args.seed,
        directory=args.dir,
    )  # fmt: skip
    report = Soak(options).run()
    print_report(report)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
