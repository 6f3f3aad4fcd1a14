"""The three facades over the one engine (``shmkafka.producer``): each peer's producer API,
with the peer's names, defaults, errors and timeouts, on the shared pool.

    kafka_python/   KafkaProducer (``shmkafka.kafka``, ``from shmkafka import KafkaProducer``)
    confluent/      Producer, SerializingProducer, aio.AIOProducer, AsyncSerializingProducer
                    (``shmkafka.confluent_kafka``, ``from shmkafka import Producer``)
    aiokafka/       AIOKafkaProducer (``shmkafka.aiokafka``)
    peer_modules    what the mirror modules pass through from a peer, and what they refuse

A facade turns its API's calls into the engine's: a handle's ``send`` (or the C entries of
``shmkafka.producer.entry``), its futures and its configuration (``Settings``). The engine
imports no facade (tests/unit/test_imports.py).
"""
