"""Sans-IO Kafka protocol codec: framing, messages, RecordBatch v2, compression, hashing.

No sockets here: bytes in, frozen dataclasses out. This package imports nothing else of
shmkafka, so the Sender, broker_stub and tests can all use it in either role.
"""
