"""aiokafka 0.14's ``AIOKafkaProducer`` (``producer``) and its value types and errors
(``types``: aiokafka's own when installed), over the shared pool."""
