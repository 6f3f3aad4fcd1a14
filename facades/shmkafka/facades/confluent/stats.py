"""``stats_cb``'s JSON: librdkafka's statistics schema (STATISTICS.md), filled from what the
pool knows. The Sender's counters are the whole pool's (every process's records go through
it), per broker connection included (shm/broker_stats.py); ``msg_cnt`` and ``replyq`` are
this producer's own. Fields with no counterpart here are listed in docs/compatibility.md and
given librdkafka's "nothing" value (0, or -1001 for offsets), never an invented one.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from shmkafka.producer.views import BROKER_STATES as STATES
from shmkafka.producer.views import BrokerStats
from shmkafka.protocol.clock import monotonic_ms

WINDOW_FIELDS = ("min", "max", "avg", "sum", "stddev", "p50", "p75", "p90", "p95", "p99",
                 "p99_99", "outofrange", "hdrsize", "cnt")  # fmt: skip


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


def _window(minimum: int = 0, maximum: int = 0, total: int = 0, count: int = 0) -> dict[str, int]:
    """librdkafka's window statistics: min, max, avg, sum, cnt since the Sender started
    (the percentiles and stddev are not kept: 0)."""
    out = dict.fromkeys(WINDOW_FIELDS, 0)
    out.update(min=minimum, max=maximum, sum=total, cnt=count, avg=total // count if count else 0)
    return out


def _broker(b: BrokerStats, now_ms: int) -> tuple[str, dict[str, Any]]:
    name = f"{b.name}/{b.node_id if b.node_id >= 0 else 'bootstrap'}"
    t = b.traffic
    return name, {
        "name": name, "nodeid": b.node_id, "nodename": b.name,
        "source": "learned" if b.node_id >= 0 else "configured",
        "state": STATES[b.state], "stateage": max(0, now_ms - b.state_since_ms) * 1000,
        "outbuf_cnt": b.outbuf_cnt, "outbuf_msg_cnt": 0, "waitresp_cnt": b.waitresp_cnt,
        "waitresp_msg_cnt": 0, "tx": t.tx, "txbytes": t.txbytes, "txerrs": 0,
        "txretries": 0, "txidle": -1, "req_timeouts": 0, "rx": t.rx, "rxbytes": t.rxbytes,
        "rxerrs": 0, "rxcorriderrs": 0, "rxpartial": 0, "rxidle": -1, "zbuf_grow": 0,
        "buf_grow": 0, "wakeups": 0, "connects": t.connects, "disconnects": t.disconnects,
        "int_latency": _window(), "outbuf_latency": _window(),
        "rtt": _window(t.rtt_min_us, t.rtt_max_us, t.rtt_sum_us, t.rtt_cnt),
        "throttle": _window(), "req": {}, "toppars": {},
    }  # fmt: skip


def statistics(producer: Any, settings: dict[str, Any]) -> str:
    """One statistics document for ``producer`` (a ``shmkafka.Producer``)."""
    now_us = int(time.monotonic() * 1_000_000)
    handle = producer._handle
    stat = handle.stat() if handle is not None else None
    sender = stat["sender"] if stat else {}
    now_ms = monotonic_ms()
    brokers = dict(_broker(b, now_ms) for b in handle.broker_stats()) if handle else {}
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
        "brokers": brokers,
        "topics": topics,
        "tx": sender.get("produce_requests", 0),
        "tx_bytes": sender.get("bytes_sent", 0),
        "rx": sum(b["rx"] for b in brokers.values()),
        "rx_bytes": sum(b["rxbytes"] for b in brokers.values()),
        "txmsgs": sender.get("records_sent", 0),
        "txmsg_bytes": 0,
        "rxmsgs": 0,
        "rxmsg_bytes": 0,
        # shmkafka's own: records whose result was lost and that their process failed
        "shmkafka_internal_errors": stat["internal_errors"] if stat else 0,
    }
    return json.dumps(doc)
