"""shmkafka.perf (see the README's Layout)."""
