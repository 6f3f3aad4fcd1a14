"""``shmkafka.errors``: kafka-python's error names with shmkafka's own, the public module
(``shmkafka.kafka.errors`` is the same under kafka-python's path). They are defined in the
kafka-python facade (``shmkafka.facades.kafka_python.errors``), shmkafka's own in
``shmkafka.pool.errors``."""

from shmkafka.facades.kafka_python.errors import *  # noqa: F403
from shmkafka.facades.kafka_python.errors import __all__ as __all__
