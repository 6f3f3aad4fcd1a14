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
    clean = sub.add_parser(
        "cleanup", help="remove shared-memory pools whose processes are all dead"
    )
    clean.add_argument("--pool", help="only this pool (default: every shmkafka pool)")
    return parser


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
    if args.command == "sender":
        from shmkafka.sender.__main__ import run

        return run(args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
