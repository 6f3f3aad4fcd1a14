"""shmkafka.sender (see the README's Layout)."""
