"""``kafka.errors``: every name kafka-python exports (see ``shmkafka.errors``, the same
names)."""

from __future__ import annotations

from shmkafka.facades.kafka_python import producer as kafka_python  # noqa: F401  (installs the kafka-python twins)
from shmkafka.facades.kafka_python.errors import *  # noqa: F403
from shmkafka.facades.kafka_python.errors import __all__ as __all__
