"""The ``shmkafka`` command: one subcommand per job.

Rules:
- A subcommand's module is imported only when that subcommand runs (``shmkafka stat`` loads
  no Sender, no broker_stub and no benchmark): ``COMMANDS`` names each one's module, the
  function that adds its arguments to a parser, and the function that runs it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from shmkafka import __version__


@dataclass(frozen=True)
class Command:
    help: str
    module: str
    arguments: str  # (parser) -> parser: adds the subcommand's arguments
    run: str  # (args) -> exit status


COMMANDS = {
    "version": Command("print the version", "shmkafka.cli", "_no_arguments", "_version"),
    "sender": Command(
        "run a pool's Sender (a sidecar)", "shmkafka.cli.sidecar", "build_parser", "run"
    ),
    "produce": Command(
        "send lines from stdin to a topic (as kafka-console-producer)",
        "shmkafka.cli.console",
        "build_parser",
        "run",
    ),
    "stat": Command(
        "show a pool's state, read from shared memory", "shmkafka.cli", "_stat_arguments", "_stat"
    ),
    "exporter": Command(
        "serve the pools' metrics to Prometheus over HTTP",
        "shmkafka.cli.exporter",
        "build_parser",
        "run",
    ),
    "doctor": Command(
        "check what a pool needs on this host, and say what to change",
        "shmkafka.cli.doctor",
        "build_parser",
        "run",
    ),
    "cleanup": Command(
        "remove shared-memory pools whose processes are all dead",
        "shmkafka.cli",
        "_cleanup_arguments",
        "_cleanup",
    ),
    "broker-stub": Command(
        "run a broker_stub cluster (foreground)",
        "shmkafka.broker_stub.__main__",
        "build_parser",
        "run",
    ),
    "broker-stub-control": Command(
        "send a fault-injection operation to a running broker_stub",
        "shmkafka.broker_stub.__main__",
        "control_parser",
        "control",
    ),
    "perf": Command(
        "throughput/latency side by side with other clients",
        "shmkafka.perf.tool",
        "build_parser",
        "run",
    ),
}


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it has none (None, False, "")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not _has_default(action) or "%(default)" in text or "default:" in text:
            return text
        return f"{text} (default: %(default)s)".lstrip()


def _has_default(action: argparse.Action) -> bool:
    return bool(action.option_strings) and action.default not in (
        None, False, "", [], argparse.SUPPRESS)  # fmt: skip


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """argparse prints no help line for an option without help: give those that have a
    default one, so it shows too."""
    for action in parser._actions:
        if action.help is None and _has_default(action):
            action.help = "(default: %(default)s)"


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shmkafka",
        description="shmkafka: a Kafka producer for many processes, one shared pool per host.",
    )
    parser.add_argument("--version", action="version", version=f"shmkafka {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.help, add_help=False)
    return parser


def _no_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    return parser


def _version(args: argparse.Namespace) -> int:
    print(f"shmkafka {__version__}")
    print(f"C extension: {_c_extension()}")
    return 0


# the C extensions (hatch_build.py builds them), by folder under shmkafka/
C_EXTENSIONS = ("pool/_append", "producer/_tracker", "facades/confluent/_reports")


def _c_extension() -> str:
    """Whether the C extensions are installed, found without importing the producer."""
    import importlib.machinery
    import os

    import shmkafka

    missing = [
        name
        for name in C_EXTENSIONS
        if not any(
            os.path.exists(os.path.join(root, name + suffix))
            for root in shmkafka.__path__
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
        )
    ]
    if not missing:
        return "built"
    if len(missing) < len(C_EXTENSIONS):
        return f"partly built (missing {', '.join(missing)}): those parts run in Python"
    return "NOT built: every send runs in Python (slower)"


def _stat_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--pool", help="only this pool (default: every shmkafka pool)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON (with --watch: one object per pool per refresh)",
    )
    parser.add_argument(
        "--watch", action="store_true", help="show live rates, refreshed in place, until Ctrl-C"
    )
    parser.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="--watch: seconds between refreshes (rates are over this time)",
    )
    parser.add_argument("--count", type=int, metavar="N", help="--watch: stop after N refreshes")
    return parser  # fmt: skip


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _stat(args: argparse.Namespace) -> int:
    if args.watch:
        from shmkafka.cli.watch import watch

        return watch(args.pool, args.interval, args.count, args.json)
    from shmkafka.pool.stat import format_stat, pool_stat
    from shmkafka.shm.errors import ShmError
    from shmkafka.shm.segment import list_pools

    if args.pool:
        try:
            stats = [pool_stat(args.pool)]
        except (ShmError, OSError) as exc:
            print(f"shmkafka stat: {exc}", file=sys.stderr)
            return 1
    else:
        stats = []
        for name in list_pools():
            try:
                stats.append(pool_stat(name))
            except PermissionError:  # another user's pool (mode 0600): listed as such
                stats.append({"pool": name, "unreadable": "another user's pool"})
            except (ShmError, OSError) as exc:  # removed or damaged meanwhile
                stats.append({"pool": name, "unreadable": str(exc)})
    if args.json:
        print(json.dumps(stats if args.pool is None else stats[0], indent=2))
    else:
        lines = [f"pool {s['pool']}: {s['unreadable']}" if "unreadable" in s else format_stat(s)
                 for s in stats]  # fmt: skip
        print("\n".join(lines) or "no shmkafka pools found")
        print(f"C extension: {_c_extension()}")
    return 0


def _cleanup_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--pool", help="only this pool (default: every shmkafka pool)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also name the pools kept, and why")  # fmt: skip
    return parser


def _cleanup(args: argparse.Namespace) -> int:
    from shmkafka.pool.cleanup import cleanup

    results = cleanup(args.pool)
    for result in results:
        if result.removed or args.verbose or args.pool:
            print(f"{'removed' if result.removed else 'kept'} {result.pool}: {result.reason}")
    if not any(r.removed for r in results) and not args.pool:
        print("nothing to remove")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = COMMANDS.get(argv[0]) if argv else None
    if command is None:
        _top_parser().parse_args(argv)  # --help, --version, or an unknown command: exits
        _top_parser().print_help(sys.stderr)
        return 2
    module = importlib.import_module(command.module)
    parser = argparse.ArgumentParser(
        prog=f"shmkafka {argv[0]}", description=command.help, formatter_class=DefaultsFormatter
    )
    getattr(module, command.arguments)(parser)
    _show_defaults(parser)
    status: int = getattr(module, command.run)(parser.parse_args(argv[1:]))
    return status


if __name__ == "__main__":
    sys.exit(main())
