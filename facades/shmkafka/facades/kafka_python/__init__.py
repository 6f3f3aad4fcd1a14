"""kafka-python 3's ``KafkaProducer`` (``producer``) and its serializer and partitioner
interfaces (``plugins``), over the shared pool."""
