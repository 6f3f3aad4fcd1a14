"""The Sender's side of the new-batch wake protocol: before it sleeps it publishes when it
will look again, and a batch opened since its round began cancels the sleep."""

from __future__ import annotations

import time

from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer.client import Client
from shmkafka.sender.sender import Sender
from shmkafka.shm.config import PoolConfig
from shmkafka.shm.directory_view import PartitionLeader
from shmkafka.shm.layout import DIRECTORY_LOCK, H_SENDER_LINGER, H_SENDER_WAKE_AT, I64
from tests.conftest import discard
from tests.sender.memnet import MemoryNetwork

CONFIG = PoolConfig(batch_size=1024, buffer_memory=1 << 18, max_partitions=8, max_processes=4)


def test_sleep_is_announced_and_cancelled_by_a_new_batch(pool_name: str) -> None:
    handle = Client(pool_name, {}, pool_config=CONFIG, start_sender=False)
    sender_pool = SharedPool.open(pool_name)
    net = MemoryNetwork(Cluster(ClusterConfig()))
    config = SenderConfig(bootstrap_servers=net.bootstrap, linger_ms=7)
    sender = Sender(sender_pool, config, network=net)
    try:
        with handle.pool.locks.held(DIRECTORY_LOCK):
            handle.pool.directory.publish({"t": [PartitionLeader(1, 0)] * 2})
        assert handle._fast is not None, "the C append path is not built"
        handle.send("t", b"v", b"k", partition=0)  # route cached; first batch via Python
        sender._new_batches_seen = sender_pool.new_batches()
        before = int(time.monotonic() * 1000)
        assert sender._announce_sleep(40) == 40  # nothing new: it may sleep
        wake_at = I64.unpack_from(sender_pool.segment.buf, H_SENDER_WAKE_AT)[0]
        assert before + 40 <= wake_at <= int(time.monotonic() * 1000) + 40
        assert I64.unpack_from(sender_pool.segment.buf, H_SENDER_LINGER)[0] == 7
        flags = handle.send("t", b"v", b"k", partition=1).flags  # opens a batch in C
        assert flags & 2 and flags & 4  # wake: the Sender sleeps past linger
        assert sender._announce_sleep(40) == 0  # a batch opened since the round began
        assert sender._announce_sleep(0) == 0
    finally:
        sender.close()
        sender_pool.detach()
        discard(handle)
