"""shmkafka.producer: the public producer APIs (``KafkaProducer``, ``Producer``), the handle
they share, futures, partitioning and settings (see docs/internals.md)."""
