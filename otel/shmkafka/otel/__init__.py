"""OpenTelemetry for shmkafka (``pip install 'shmkafka[otel]'``): a span per record, from the
send call to its delivery, the trace context in the record's headers, and the messaging
metrics with the pool's own. See docs/observability.md."""

from shmkafka.otel.instrumentor import ShmkafkaInstrumentor

__all__ = ["ShmkafkaInstrumentor"]
