"""What statistics report of one broker connection (librdkafka's per-broker counters),
counted by the connection and published by the Sender (shm/broker_stats.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from shmkafka.shm.broker_stats import (
    APIVERSION_QUERY,
    CONNECT,
    DOWN,
    INIT,
    UP,
    BrokerStats,
    Traffic,
)

# a connection's state (connection.ConnectionState's values) → librdkafka's broker state
_STATES = {"connecting": CONNECT, "tls": CONNECT, "handshake": APIVERSION_QUERY,
           "authenticating": APIVERSION_QUERY, "ready": UP}  # fmt: skip


@dataclass
class NodeCounters(Traffic):
    state: enum.Enum | None = None  # the state last seen by ``snapshot``
    state_since_ms: int = 0

    def answered(self, rtt_us: int) -> None:
        self.rx += 1
        self.rtt_min_us = rtt_us if not self.rtt_cnt else min(self.rtt_min_us, rtt_us)
        self.rtt_max_us = max(self.rtt_max_us, rtt_us)
        self.rtt_sum_us += rtt_us
        self.rtt_cnt += 1

    def snapshot(self, node_id: int, name: str, state: enum.Enum, failures: int,
                 waitresp: int, outbuf: bool, now_ms: int) -> BrokerStats:  # fmt: skip
        if self.state is not state:
            self.state, self.state_since_ms = state, now_ms
        return BrokerStats(
            node_id,
            name,
            _STATES.get(state.value, DOWN if failures else INIT),
            self.state_since_ms,
            self.copy(),
            waitresp,
            int(outbuf),
        )
