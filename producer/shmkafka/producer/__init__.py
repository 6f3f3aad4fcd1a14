"""shmkafka.producer (see the README's Layout)."""
