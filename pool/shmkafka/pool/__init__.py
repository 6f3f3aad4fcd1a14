"""shmkafka.pool: the accumulator contract that app processes and the Sender both run over a
pool's segment: ``RecordAccumulator`` (append, drain, every change of a batch's state),
``ready``, the batches and partition deques, ``BufferPool``, the process's ``SharedPool``,
the reclaiming of dead processes' memory, the pool's metrics and ``stat``, the C append
(``_append.c``, loaded by ``fastpath``), the one ``Config`` and shmkafka's own errors. It
imports only ``shm`` and ``protocol`` (see docs/internals.md, Source tree)."""
