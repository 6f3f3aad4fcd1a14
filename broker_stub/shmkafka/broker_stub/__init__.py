"""shmkafka.broker_stub (see the README's Layout)."""
