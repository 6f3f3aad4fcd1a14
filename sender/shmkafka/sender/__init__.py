"""shmkafka.sender: the Sender process — metadata, connections, ready/drain, produce
requests, retries, idempotence, lifecycle (see docs/internals.md)."""
