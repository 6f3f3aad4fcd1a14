"""shmkafka.shm: the shared-memory pool — segment layout, BufferPool, deques, directory,
locks, completion rings, process slots, recovery (see docs/internals.md)."""
