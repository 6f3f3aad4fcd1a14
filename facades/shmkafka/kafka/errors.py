"""``kafka.errors``: every name kafka-python exports (see ``shmkafka.errors``)."""

from __future__ import annotations

from shmkafka.errors import *  # noqa: F403
from shmkafka.errors import __all__ as __all__
from shmkafka.facades.kafka_python import producer as kafka_python  # noqa: F401  (installs the kafka-python twins)
