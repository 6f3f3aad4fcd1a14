"""shmkafka.broker_stub: a Kafka-protocol test broker with fault injection, for tests and
the demo (see docs/internals.md)."""
