"""shmkafka: a Kafka producer for many processes sharing one memory-mapped accumulator.

General layout — each part is its own source root holding a portion of this package:

    cli/shmkafka/cli/                the shmkafka command and its tools
    otel/shmkafka/otel/              OpenTelemetry: the instrumentor of the three APIs (.[otel])
    perf/shmkafka/perf/              the side-by-side benchmark tool
    facades/shmkafka/facades/        the three APIs: kafka_python/, confluent/, aiokafka/
    facades/shmkafka/{kafka,confluent_kafka,aiokafka}/  the peers' import paths (mirrors)
    facades/shmkafka/                this file, and kafka-python's error names (errors.py)
    producer/shmkafka/producer/      the app process's client of a pool
    pool/shmkafka/pool/              the accumulator contract both process kinds run
    sender/shmkafka/sender/          the Sender process
    shm/shmkafka/shm/                the shared memory's map and primitives
    protocol/shmkafka/protocol/      sans-IO Kafka codec (no sockets)
    broker_stub/shmkafka/broker_stub/  a Kafka-protocol test broker
"""

import sys
from pkgutil import extend_path

if not sys.platform.startswith("linux"):
    raise ImportError(
        f"shmkafka runs on Linux only: its pool is POSIX shared memory in /dev/shm, and it "
        f"tells live processes from dead ones through /proc (this is {sys.platform!r})"
    )

# The other roots hold shmkafka/ folders without an __init__.py; join them to this package.
__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"
__all__ = ["KafkaProducer", "Producer", "__version__"]


def __getattr__(name: str) -> object:
    """The drop-in classes, imported on first use (the Sender process needs neither)."""
    if name == "KafkaProducer":
        from shmkafka.facades.kafka_python.producer import KafkaProducer

        return KafkaProducer
    if name == "Producer":
        from shmkafka.facades.confluent.producer import Producer

        return Producer
    raise AttributeError(f"module 'shmkafka' has no attribute {name!r}")
