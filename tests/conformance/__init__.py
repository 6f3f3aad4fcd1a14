"""`make conformance`: kafka-python's own producer tests, run unchanged against
``shmkafka.KafkaProducer`` and against kafka-python itself (see run.py)."""
