"""shmkafka.sender: the Sender process — metadata, connections, the round over the pool's
ready()/drain() (pool/), produce requests, retries, idempotence, transactions, lifecycle; it
imports neither the client nor a facade (see docs/internals.md)."""
