"""Worker processes of the transaction crash tests (spawned: importable, picklable args)."""

from __future__ import annotations

import time
from typing import Any


def transact_then(pool: str, bootstrap: str, txn_id: str, topic: str, count: int, then: str,
                  ready: Any) -> None:  # fmt: skip
    """init, begin, ``count`` records acknowledged; then ``hang`` (until killed) or
    ``commit`` (a fault point kills it once the commit is posted)."""
    from shmkafka.kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id, pool=pool)
    p.init_transactions()
    p.begin_transaction()
    for i in range(count):
        p.send(topic, b"open:%d" % i, partition=0)
    p.flush()
    ready.set()
    if then == "commit":
        p.commit_transaction()
    while True:
        time.sleep(1)
