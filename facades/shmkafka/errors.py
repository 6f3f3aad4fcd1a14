"""``shmkafka.errors``: kafka-python's error names with shmkafka's own, the public module.

The names live in the kafka-python facade (``shmkafka.facades.kafka_python.errors``;
shmkafka's own errors are defined in ``shmkafka.pool.errors``): this name is the same
module, so every name it has is reachable here, as ``shmkafka.kafka.errors`` reaches it under
kafka-python's path."""

import sys

from shmkafka.facades.kafka_python import errors as _errors

sys.modules[__name__] = _errors  # (the import system hands out what sys.modules holds)
