"""shmkafka.shm (see the README's Layout)."""
