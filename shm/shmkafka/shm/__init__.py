"""shmkafka.shm: the shared memory itself — the memory map (layout.py, which names the writer
of every field), the segment, locks, process slots, the topic directory, completion rings,
the event ring and the boards; it imports nothing else of shmkafka (see docs/internals.md)."""
