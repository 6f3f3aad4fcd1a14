"""The three facades over the client (``shmkafka.producer``): each peer's producer API,
with the peer's names, defaults, errors and timeouts, on the shared pool.

    kafka_python/   KafkaProducer (``shmkafka.kafka``, ``from shmkafka import KafkaProducer``)
    confluent/      Producer, SerializingProducer, aio.AIOProducer, AsyncSerializingProducer
                    (``shmkafka.confluent_kafka``, ``from shmkafka import Producer``)
    aiokafka/       AIOKafkaProducer (``shmkafka.aiokafka``)
    peer_modules    what the mirror modules pass through from a peer, and what they refuse
    entry_switch    turning a facade's C entry on and off, the same for the three

A facade turns its API's calls into its client's: ``Client.send`` (or the C entries of
``shmkafka.producer.entry``, bound with ``Client.bind_entry``), its futures and its
configuration (``shmkafka.pool.config.Config``). Nothing below imports a facade
(tests/unit/test_imports.py).
"""
