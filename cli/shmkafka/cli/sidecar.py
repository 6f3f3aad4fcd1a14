"""``shmkafka sender --pool NAME --create``: a Sender run beside the apps (a sidecar, a
systemd service) that makes its pool itself, with the settings a producer of the chosen API
would ask for, and serves it until stopped.

Rules:
- The pool is made with exactly the settings ``KafkaProducer(**properties)`` (``--api
  kafka-python``) or ``Producer(properties)`` (``--api confluent``) would ask for, so the apps'
  producers with the same arguments attach to it; a producer asking for other settings is
  refused with the differences named (producer/client.py), as on any pool.
- A pool of that name made with other settings is an error here, not replaced.
- Properties come as ``key=value`` (``--producer-property``, repeatable) and from files of
  such lines (``--producer.config``); the command line wins. kafka-python's values are read
  as Python literals where they are ones (``linger_ms=5``, ``acks=all`` stays a string);
  user names and secrets stay text.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from shmkafka.cli.properties import add_property_arguments, literal, read_properties
from shmkafka.facades.confluent import producer as confluent
from shmkafka.facades.kafka_python import producer as kafka_python
from shmkafka.pool.config import Config, SenderConfig
from shmkafka.pool.errors import KafkaConfigurationError
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.sender import __main__ as sender_command
from shmkafka.shm.errors import LayoutMismatchError

APIS = ("kafka-python", "confluent")
log = logging.getLogger("shmkafka.sender")


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The Sender's arguments (``python -m shmkafka.sender``) and the sidecar's."""
    parser = sender_command.build_parser(parser or argparse.ArgumentParser(prog="shmkafka sender"))
    parser.add_argument(
        "--create", action="store_true",
        help="make the pool with the settings a producer of --api with these properties "
        "would ask for, and run until stopped (a sidecar)",
    )  # fmt: skip
    parser.add_argument(
        "--api", choices=APIS, default="kafka-python",
        help="whose argument names the properties use (with --create; default: kafka-python)",
    )  # fmt: skip
    add_property_arguments(parser, "linger_ms=5", "with --create")
    return parser


def run(args: argparse.Namespace) -> int:
    return sender_command.run(args, create if args.create else None)


def create(args: argparse.Namespace) -> SenderConfig:
    """--create: the pool made (or found) with the settings its producers will ask for."""
    if not args.bootstrap or args.config_json:
        raise KafkaConfigurationError("--create needs --bootstrap-server and no --config-json")
    properties = read_properties(args.producer_property, args.producer_config)
    settings = settings_for(args.api, args.bootstrap, properties, args.pool)
    made = create_pool(args.pool, settings)
    log.info("pool %s %s", args.pool, "created" if made else "found with the same settings")
    return settings.sender


def settings_for(api: str, bootstrap: str, properties: dict[str, str], pool: str) -> Config:
    """The settings a producer of ``api`` with these properties would ask for."""
    if api == "kafka-python":
        configs = {key: value if _text_only(key) else literal(value)
                   for key, value in properties.items()}  # fmt: skip
        configs.update(bootstrap_servers=bootstrap.split(","), pool=pool)
        return kafka_python.settings_for(configs)
    if api == "confluent":
        conf: dict[str, Any] = {**properties, "bootstrap.servers": bootstrap}
        conf["shmkafka.pool"] = pool
        return confluent.settings_for(conf)
    raise KafkaConfigurationError(f"--api must be one of {', '.join(APIS)}, got {api!r}")


def _text_only(key: str) -> bool:
    """A user name or a secret is text, whatever it looks like (a password ``98765432``)."""
    return key.endswith(("password", "username", "_pem"))


def create_pool(name: str, settings: Config) -> bool:
    """Make the pool (True), or find it made with the same settings (False)."""
    try:
        pool = SharedPool.open(name, settings.pool)
    except LayoutMismatchError as exc:
        raise KafkaConfigurationError(
            f"pool {name!r} exists with other settings ({exc}): stop its producers and run "
            f"`shmkafka cleanup --pool {name}`, or choose another --pool"
        ) from None
    try:
        return pool.created
    finally:
        pool.detach()
