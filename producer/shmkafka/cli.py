"""The ``shmkafka`` command: one subcommand per job (more arrive with later parts)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from shmkafka import __version__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shmkafka", description=__doc__)
    parser.add_argument("--version", action="version", version=f"shmkafka {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("version", help="print the version")
    from shmkafka.sender.__main__ import build_parser as sender_parser

    sender_parser(sub.add_parser("sender", help="run a pool's Sender (a sidecar)"))
    stat = sub.add_parser("stat", help="show a pool's state, read from shared memory")
    stat.add_argument("--pool", help="only this pool (default: every shmkafka pool)")
    stat.add_argument("--json", action="store_true", help="print JSON")
    clean = sub.add_parser(
        "cleanup", help="remove shared-memory pools whose processes are all dead"
    )
    clean.add_argument("--pool", help="only this pool (default: every shmkafka pool)")
    from shmkafka.broker_stub.__main__ import build_parser as stub_parser
    from shmkafka.broker_stub.__main__ import control_parser

    stub_parser(sub.add_parser("broker-stub", help="run a broker_stub cluster (foreground)"))
    from shmkafka.perf.tool import build_parser as perf_parser

    perf_parser(sub.add_parser("perf", help="throughput/latency side by side with other clients"))
    control_parser(
        sub.add_parser("broker-stub-control", help="send a fault-injection operation to it")
    )
    return parser


def _stat(pool: str | None, as_json: bool) -> int:
    import json

    from shmkafka.shm.segment import list_pools
    from shmkafka.shm.stat import format_stat, pool_stat

    stats = [pool_stat(name) for name in ([pool] if pool else list_pools())]
    if as_json:
        print(json.dumps(stats if pool is None else stats[0], indent=2))
    else:
        print("\n".join(format_stat(s) for s in stats) or "no shmkafka pools found")
    return 0


def _cleanup(pool: str | None) -> int:
    from shmkafka.shm.cleanup import cleanup

    results = cleanup(pool)
    for result in results:
        verb = "removed" if result.removed else "kept"
        print(f"{verb} {result.pool}: {result.reason}")
    if not results:
        print("no shmkafka pools found")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        print(f"shmkafka {__version__}")
        return 0
    if args.command == "cleanup":
        return _cleanup(args.pool)
    if args.command == "stat":
        return _stat(args.pool, args.json)
    if args.command == "broker-stub":
        from shmkafka.broker_stub.__main__ import run as run_stub

        return run_stub(args)
    if args.command == "broker-stub-control":
        from shmkafka.broker_stub.__main__ import control

        return control(args)
    if args.command == "perf":
        from shmkafka.perf.tool import run as run_perf

        return run_perf(args)
    if args.command == "sender":
        from shmkafka.sender.__main__ import run

        return run(args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
