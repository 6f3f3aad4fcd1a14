"""``python -m shmkafka.sender --pool NAME ...``: run a pool's Sender. ``shmkafka sender`` is
this command with ``--create`` added (cli/sidecar.py: the pool made by the Sender itself)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence

from shmkafka.pool.config import SECRET_FIELDS, SenderConfig
from shmkafka.pool.errors import KafkaConfigurationError
from shmkafka.protocol.errors import KafkaError
from shmkafka.sender.service import IDLE_EXIT_MS, run_sender

log = logging.getLogger("shmkafka.sender")


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m shmkafka.sender")
    parser.add_argument("--pool", required=True, help="pool name")
    parser.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", help="HOST:PORT[,HOST:PORT...]"
    )
    parser.add_argument(
        "--config-json",
        help="SenderConfig fields as a JSON object, or - to read it from stdin (use this when "
        "it holds secrets: a command line is visible to every user)",
    )
    parser.add_argument("--log-file", help="log to this file (default: stderr)")
    parser.add_argument("--log-level", default="INFO", help="default: INFO")
    parser.add_argument(
        "--idle-exit-ms", type=int, default=None,
        help=f"exit when no producer is attached this long (default: {IDLE_EXIT_MS}; "
        "with shmkafka sender --create, never)",
    )  # fmt: skip
    return parser


def config_from_args(args: argparse.Namespace) -> SenderConfig:
    text = sys.stdin.read() if args.config_json == "-" else args.config_json
    fields = json.loads(text) if text else {}
    inline = [k for k in SECRET_FIELDS if fields.get(k) is not None and args.config_json != "-"]
    if inline:  # (named, never shown: a command line is visible to every user)
        raise KafkaConfigurationError(
            f"{', '.join(inline)} in --config-json on the command line: give the JSON on "
            "stdin with --config-json -"
        )
    if args.bootstrap:
        fields["bootstrap_servers"] = args.bootstrap.split(",")
    if "bootstrap_servers" in fields:
        fields["bootstrap_servers"] = tuple(fields["bootstrap_servers"])
    return SenderConfig(**fields)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args)


def run(
    args: argparse.Namespace, create: Callable[[argparse.Namespace], SenderConfig] | None = None
) -> int:
    """Run the Sender; ``create`` (the sidecar's) makes the pool first and gives its settings,
    and the Sender then never exits for want of producers unless --idle-exit-ms says so."""
    handler: logging.Handler = (
        logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler()
    )
    quiet = not args.log_file and not sys.stderr.isatty()
    if quiet:
        # started by an app: its lines reach the apps through the pool's event ring, and
        # stderr (a file the app reads only if we exit at start) gets what is serious
        handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(message)s"))
    root = logging.getLogger("shmkafka")
    root.addHandler(handler)
    root.setLevel(args.log_level.upper())
    try:
        config = create(args) if create is not None else config_from_args(args)
    except (KafkaError, OSError) as exc:
        print(f"shmkafka sender: {exc}", file=sys.stderr)
        return 2
    idle_exit_ms = args.idle_exit_ms
    if idle_exit_ms is None and create is None:
        idle_exit_ms = IDLE_EXIT_MS
    profile = os.environ.get("SHMKAFKA_SENDER_PROFILE")
    if profile:  # a developer's aid: cProfile statistics of the whole Sender run
        import cProfile

        profiler = cProfile.Profile()
        try:
            return profiler.runcall(run_sender, args.pool, config, idle_exit_ms, quiet_stderr=quiet)
        finally:
            profiler.dump_stats(profile)
    return run_sender(args.pool, config, idle_exit_ms, quiet_stderr=quiet)


if __name__ == "__main__":
    sys.exit(main())
