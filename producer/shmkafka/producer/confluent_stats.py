"""``stats_cb``'s JSON: librdkafka's statistics schema (STATISTICS.md), filled from what the
pool knows. The Sender's counters are the whole pool's (every process's records go through
it); ``msg_cnt`` and ``replyq`` are this producer's own. Fields with no counterpart here are
listed in docs/compatibility.md and given librdkafka's "nothing" value (0, or -1 for
offsets), never an invented one.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from shmkafka.shm.stat import segment_stat

_STARTED = time.monotonic()
_INSTANCES = 0


def _partition(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "partition": p["partition"], "broker": p["leader"], "leader": p["leader"],
        "desired": False, "unknown": False,
        "msgq_cnt": p["queued_records"], "msgq_bytes": p["queued_bytes"],
        "xmit_msgq_cnt": 0, "xmit_msgq_bytes": 0, "fetchq_cnt": 0, "fetchq_size": 0,
        "fetch_state": "none", "query_offset": -1001, "next_offset": -1001,
        "app_offset": -1001, "stored_offset": -1001, "committed_offset": -1001,
        "eof_offset": -1001, "lo_offset": -1001, "hi_offset": -1001, "ls_offset": -1001,
        "consumer_lag": -1, "consumer_lag_stored": -1, "leader_epoch": -1,
        "txmsgs": 0, "txbytes": 0, "rxmsgs": 0, "rxbytes": 0,
        "msgs": p["queued_records"], "rx_ver_drops": 0, "msgs_inflight": 0,
        "next_ack_seq": 0, "next_err_seq": 0, "acked_msgid": 0,
    }  # fmt: skip


def statistics(producer: Any, settings: dict[str, Any]) -> str:
    """One statistics document for ``producer`` (a ``shmkafka.Producer``)."""
    now_us = int(time.monotonic() * 1_000_000)
    handle = producer._handle
    stat = segment_stat(handle.pool.segment) if handle is not None else None
    sender = stat["sender"] if stat else {}
    topics: dict[str, Any] = {}
    for p in stat["partitions"] if stat else ():
        topic = topics.setdefault(p["topic"], {
            "topic": p["topic"], "age": 0, "metadata_age": 0, "partitions": {},
        })  # fmt: skip
        topic["partitions"][str(p["partition"])] = _partition(p)
    doc = {
        "name": f"{settings['client_id']}#producer-{os.getpid()}",
        "client_id": settings["client_id"],
        "type": "producer",
        "ts": now_us,
        "time": int(time.time()),
        "age": int((time.monotonic() - producer._created) * 1_000_000),
        "replyq": len(producer._reports),
        "msg_cnt": len(producer),
        "msg_size": sum(p["queued_bytes"] for p in stat["partitions"]) if stat else 0,
        "msg_max": settings["max_messages"],
        "msg_size_max": settings["buffer_kbytes"] * 1024,
        "simple_cnt": 0,
        "metadata_cache_cnt": len(topics),
        "brokers": {},
        "topics": topics,
        "tx": sender.get("produce_requests", 0),
        "tx_bytes": sender.get("bytes_sent", 0),
        "rx": sender.get("produce_requests", 0),
        "rx_bytes": 0,
        "txmsgs": sender.get("records_sent", 0),
        "txmsg_bytes": 0,
        "rxmsgs": 0,
        "rxmsg_bytes": 0,
    }
    return json.dumps(doc)
