"""``shmkafka sender --pool NAME --create``: a Sender run beside the apps (a sidecar, a
systemd service) that makes its pool itself, with the settings a producer of the chosen API
would ask for, and serves it until stopped.

Rules:
- The pool is made with exactly the settings ``KafkaProducer(**properties)`` (``--api
  kafka-python``) or ``Producer(properties)`` (``--api confluent``) would ask for, so the apps'
  producers with the same arguments attach to it; a producer asking for other settings is
  refused with the differences named (engine.py), as on any pool.
- A pool of that name made with other settings is an error here, not replaced.
- Properties come as ``key=value`` (``--producer-property``, repeatable) and from files of
  such lines (``--producer.config``); the command line wins. kafka-python's values are read
  as Python literals where they are ones (``linger_ms=5``, ``acks=all`` stays a string).
"""

from __future__ import annotations

from typing import Any

from shmkafka.errors import KafkaConfigurationError
from shmkafka.facades.confluent import producer as confluent
from shmkafka.facades.kafka_python import producer as kafka_python
from shmkafka.producer.engine import Settings
from shmkafka.producer.properties import literal
from shmkafka.shm.errors import LayoutMismatchError
from shmkafka.shm.pool import SharedPool

APIS = ("kafka-python", "confluent")


def settings_for(api: str, bootstrap: str, properties: dict[str, str], pool: str) -> Settings:
    """The settings a producer of ``api`` with these properties would ask for."""
    if api == "kafka-python":
        configs = {key: literal(value) for key, value in properties.items()}
        configs.update(bootstrap_servers=bootstrap.split(","), pool=pool)
        return kafka_python.settings_for(configs)
    if api == "confluent":
        conf: dict[str, Any] = {**properties, "bootstrap.servers": bootstrap}
        conf["shmkafka.pool"] = pool
        return confluent.settings_for(conf)
    raise KafkaConfigurationError(f"--api must be one of {', '.join(APIS)}, got {api!r}")


def create_pool(name: str, settings: Settings) -> bool:
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
