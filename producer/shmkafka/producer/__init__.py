"""shmkafka.producer: the app process's client of a pool, under the public APIs (which live in
``shmkafka.facades``): ``Client`` (client.py), the process's slot and completion thread
(process_slot.py), futures and their C tracker, the C entries of ``send()`` and ``produce()``,
the Sender's supervisor and the transactions' client side. The Sender never imports it
(see docs/internals.md, Source tree)."""
