"""The Sender's counters per broker connection, for statistics (the confluent API's
``stats_cb`` reports them in librdkafka's ``brokers`` section).

Rules:
- Only the Sender writes (layout.py, region BROKER STATS): ``brokers_version`` goes odd,
  the whole table is rewritten, ``brokers_version`` goes even. A reader copies the table
  and takes it only if the version was the same even number before and after; it tries a
  few times, then answers with no brokers (statistics may miss one interval, never mix two).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from shmkafka.shm.layout import BROKER, BROKER_SLOTS, H_BROKERS_VERSION, U64
from shmkafka.shm.segment import Segment

# librdkafka's broker states, as its statistics name them
STATES = ("INIT", "DOWN", "CONNECT", "APIVERSION_QUERY", "UP")
INIT, DOWN, CONNECT, APIVERSION_QUERY, UP = range(5)


@dataclass
class Traffic:
    """One broker connection's counters: the Sender's connection counts into them
    (sender/node_counters.py), the table carries a copy of them."""

    tx: int = 0
    txbytes: int = 0
    rx: int = 0
    rxbytes: int = 0
    connects: int = 0
    disconnects: int = 0
    rtt_min_us: int = 0
    rtt_max_us: int = 0
    rtt_sum_us: int = 0
    rtt_cnt: int = 0

    def copy(self) -> Traffic:
        return Traffic(*(getattr(self, f.name) for f in dataclasses.fields(Traffic)))


@dataclass(frozen=True)
class BrokerStats:
    node_id: int
    name: str  # host:port
    state: int
    state_since_ms: int
    traffic: Traffic = field(default_factory=Traffic)
    waitresp_cnt: int = 0
    outbuf_cnt: int = 0


class BrokerTable:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.at = segment.layout.brokers_at

    def publish(self, brokers: list[BrokerStats]) -> None:
        """Rewrite the table (the Sender only)."""
        buf = self.segment.buf
        version = U64.unpack_from(buf, H_BROKERS_VERSION)[0]
        self.segment.store_u64(H_BROKERS_VERSION, version | 1)
        for index in range(BROKER_SLOTS):
            at = self.at + index * BROKER.size
            if index >= len(brokers):
                BROKER.pack_into(buf, at, 0, 0, 0, 0, b"", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
                continue
            b = brokers[index]
            t = b.traffic
            name = b.name.encode()[:64]
            BROKER.pack_into(
                buf, at, b.node_id, b.state, 1, len(name), name, t.tx, t.txbytes, t.rx,
                t.rxbytes, t.connects, t.disconnects, b.waitresp_cnt, b.outbuf_cnt,
                t.rtt_min_us, t.rtt_max_us, t.rtt_sum_us, t.rtt_cnt, b.state_since_ms,
            )  # fmt: skip
        self.segment.store_u64(H_BROKERS_VERSION, (version | 1) + 1)

    def read(self) -> list[BrokerStats]:
        """The table, or no brokers if no whole copy could be read (see ``read_whole``)."""
        table = self.read_whole()
        return [] if table is None else table

    def read_whole(self, attempts: int = 5) -> list[BrokerStats] | None:
        """The table as one rewrite left it, or None if every attempt met a rewrite (the
        reader yields the CPU between attempts, so the writer can finish)."""
        buf = self.segment.buf
        for attempt in range(attempts):
            if attempt:
                time.sleep(0)
            before = U64.unpack_from(buf, H_BROKERS_VERSION)[0]
            if before & 1:
                continue
            rows = [BROKER.unpack_from(buf, self.at + i * BROKER.size) for i in range(BROKER_SLOTS)]
            if U64.unpack_from(buf, H_BROKERS_VERSION)[0] == before:
                return [_stats(row) for row in rows if row[2]]
        return None


def _stats(row: tuple[int, ...]) -> BrokerStats:
    (node_id, state, _, size, raw, tx, txbytes, rx, rxbytes, connects, disconnects, waitresp,
     outbuf, rtt_min, rtt_max, rtt_sum, rtt_cnt, since) = row  # fmt: skip
    name = bytes(raw[:size]).decode("utf-8", "replace")  # type: ignore[index]
    traffic = Traffic(tx, txbytes, rx, rxbytes, connects, disconnects, rtt_min, rtt_max,
                      rtt_sum, rtt_cnt)  # fmt: skip
    return BrokerStats(node_id, name, state, since, traffic, waitresp, outbuf)
