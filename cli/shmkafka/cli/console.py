"""``shmkafka produce``: lines from stdin to a topic, as ``kafka-console-producer`` does.

    shmkafka produce --bootstrap-server HOST:PORT --topic T
        [--property parse.key=true --property key.separator=:]
        [--producer-property linger.ms=5] [--producer.config FILE]

Every line is a record's value; with ``parse.key=true`` the text before the first
``key.separator`` (default a tab) is its key. Producer properties use Kafka's (librdkafka's)
names and go to shmkafka's confluent-kafka ``Producer``. Every record is flushed before the
command ends; it exits 1 if one was not delivered, naming it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shmkafka.cli.properties import add_property_arguments

READER_PROPERTIES = ("parse.key", "key.separator", "ignore.error")


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
    )  # fmt: skip
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE",
        help="how lines are read: parse.key (default: false), key.separator (default: a "
        "tab), ignore.error (default: false: a line without the separator stops)",
    )  # fmt: skip
    add_property_arguments(parser, "linger.ms=5")
    return parser


def _flag(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


def run(args: argparse.Namespace) -> int:
    from shmkafka.cli.properties import read_properties
    from shmkafka.confluent_kafka import KafkaException, Producer

    try:
        reader = read_properties(args.property, [])
        unknown = sorted(set(reader) - set(READER_PROPERTIES))
        if unknown:
            raise ValueError(f"unknown --property {', '.join(unknown)}: use "
                             f"{', '.join(READER_PROPERTIES)}")  # fmt: skip
        conf: dict[str, Any] = read_properties(args.producer_property, args.producer_config)
        conf["bootstrap.servers"] = args.bootstrap
        producer = Producer(conf)
    except (KafkaException, ValueError, TypeError, OSError) as exc:
        print(f"shmkafka produce: {exc}", file=sys.stderr)
        return 2
    parse_key = _flag(reader.get("parse.key", "false"))
    separator = reader.get("key.separator", "\t")
    ignore_error = _flag(reader.get("ignore.error", "false"))
    failed: list[str] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            failed.append(f"{message.value()!r}: {error.str()}")

    status = 0
    for number, line in enumerate(sys.stdin, 1):
        line = line.rstrip("\n")
        key: str | None = None
        if parse_key:
            key, sep, value = line.partition(separator)
            if not sep:
                print(f"shmkafka produce: no key separator {separator!r} on line {number}",
                      file=sys.stderr)  # fmt: skip
                if ignore_error:
                    continue
                status = 1
                break
            line = value
        producer.produce(args.topic, line.encode(), None if key is None else key.encode(),
                         on_delivery=on_delivery)  # fmt: skip
        producer.poll(0)
    producer.flush()
    producer.close()
    for failure in failed:
        print(f"shmkafka produce: not delivered: {failure}", file=sys.stderr)
    return 1 if failed else status
