"""``ShmkafkaInstrumentor``: OpenTelemetry for shmkafka's three APIs, as the contrib
instrumentations are used (``opentelemetry-instrument`` finds it by its entry point, in the
``opentelemetry_instrumentor`` group; ``ShmkafkaInstrumentor().instrument()`` by hand).

Rules:
- ``instrument`` wraps the send call of each API's class (wrappers.py) and registers the
  pool's instruments (pool_metrics.py); ``uninstrument`` unwraps them. Producers made before
  or after are covered alike: the wrapper is on the class.
- Until it is instrumented nothing of this package runs: the classes are the facades' own,
  and a send costs what it costs without OpenTelemetry installed.
- ``instrumentation_dependencies`` is empty: shmkafka instruments itself, so no peer library
  must be installed.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper

from shmkafka.otel import pool_metrics, wrappers
from shmkafka.otel.telemetry import Telemetry
from shmkafka.producer import results

# (module, attribute path, the wrapper factory): the send call of each API's class
TARGETS = (
    ("shmkafka.facades.kafka_python.producer", "KafkaProducer.send", wrappers.kafka_send),
    ("shmkafka.facades.confluent.producer", "Producer.produce", wrappers.confluent_produce),
    ("shmkafka.facades.aiokafka.producer", "AIOKafkaProducer.send", wrappers.aiokafka_send),
)


class ShmkafkaInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces and metrics for every record sent through shmkafka's ``KafkaProducer``,
    ``Producer`` (and ``SerializingProducer``, ``AIOProducer``, ``AsyncSerializingProducer``)
    and ``AIOKafkaProducer``."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        telemetry = Telemetry(kwargs.get("tracer_provider"), kwargs.get("meter_provider"))
        for module, name, factory in TARGETS:
            wrap_function_wrapper(module, name, factory(telemetry))
        results.batch_listener = telemetry.views.heard
        pool_metrics.register(telemetry.meter)
        pool_metrics.active = True

    def _uninstrument(self, **kwargs: Any) -> None:
        import importlib

        results.batch_listener = None
        pool_metrics.active = False
        for module, name, _ in TARGETS:
            owner, method = name.split(".")
            unwrap(getattr(importlib.import_module(module), owner), method)
