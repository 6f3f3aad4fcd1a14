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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        print(f"shmkafka {__version__}")
        return 0
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
