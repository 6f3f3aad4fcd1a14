"""confluent-kafka 2.16's producers over the shared pool: ``Producer`` (``producer``: librdkafka's
properties checked by ``config`` against ``librdkafka_properties``; records waiting for their
topic in ``records``; statistics in ``stats``), ``SerializingProducer`` (``serializing``),
``aio.AIOProducer`` (``aio``) and ``aio.AsyncSerializingProducer`` (``aio_serializing``); its
value types (``types``: confluent-kafka's own when installed, ``pure`` otherwise) and error
codes (``librdkafka_errors``)."""
