"""shmkafka.producer: the app process's engine under the public APIs (which live in
``shmkafka.facades``): the handle each facade drives, its slot in the pool, futures and their
C tracker, the Sender's supervisor, settings and transactions (see docs/internals.md)."""
