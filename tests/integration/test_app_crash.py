"""An app process killed right after ``send()`` returned: its records are in shared memory,
and the Sender delivers every one of them."""

from __future__ import annotations

import multiprocessing as mp
import signal

import pytest

from tests.integration import e2e_workers
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.integration.test_sender_e2e import _wait_for_sender_exit
from tests.peers import Peer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("count", [1, 777, 20_000])
def test_records_sent_before_a_sigkill_are_all_delivered(
    tansu: Peer, pool_name: str, count: int
) -> None:
    topic = unique_topic("app-crash")
    with cluster(tansu) as c:
        partitions = c.ensure_topic(topic, 3)
    config = {"bootstrap_servers": [f"{h}:{p}" for h, p in tansu.brokers], "linger_ms": 50}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    app = ctx.Process(target=e2e_workers.send_then_die, args=(pool_name, config, topic, count, out))
    app.start()
    sender = out.get(timeout=60)
    app.join(30)
    assert app.exitcode == -signal.SIGKILL
    _wait_for_sender_exit(sender, pool_name)  # it delivers everything, then removes the pool
    messages = consume_all(tansu, topic, list(range(partitions)), count, timeout=30)
    seqs = sorted(int(m.value().split(b":")[1]) for m in messages)
    assert seqs == list(range(count))
