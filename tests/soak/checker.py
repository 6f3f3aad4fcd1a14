"""The soak's checker: ``python -m tests.soak.checker CONFIG.json``.

It reads the topic back while the run goes on (a read_committed confluent-kafka consumer,
through the same proxies as the producers), so the broker may drop old segments by
retention. When the harness creates ``final`` in the run directory it reads up to every
partition's high watermark, then reads every worker's history and classifies each record
(``classify``), writing ``verdict.json``.

Classes, per record (worker, incarnation, seq):
- lost: acknowledged (or in a committed transaction) but never read back;
- duplicated: read back more than once;
- reordered: within one incarnation and one partition, a lower seq after a higher one;
- phantom: read back but never announced by an intent, or refused at the call, or of no
  known incarnation;
- resolved twice: more than one outcome (acked, failed) for one send;
- ack mismatch: read back at another partition or offset than its acknowledgement said;
- failed yet written: failed with an error, and read back (Kafka allows it after a timeout:
  counted apart, not a defect);
- hung: a clean stop found its outcome never came (``UNRESOLVED``);
- fire-and-forget absent: a fire-and-forget worker stopped cleanly after a flush, and a
  record it sent is not there.
Transactions: a committed one is all visible, an aborted one none, an unfinished one (its
process killed) all or none.
"""

from __future__ import annotations

import array
import glob
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.soak.history import (
    ACKED,
    CLEAN_END,
    FAILED,
    FULL,
    INTENT,
    REFUSED,
    TXN_ABORTED,
    TXN_BEGIN,
    TXN_COMMITTED,
    TXN_COMMITTING,
    UNRESOLVED,
    VALUE_HEADER,
    read_history,
)

EXAMPLES = 10  # examples kept of each defect class
_SEEN_NONE = -1


@dataclass
class Seen:
    """What was read back of one incarnation: where each seq was found."""

    where: array.array[int] = field(default_factory=lambda: array.array("q"))
    copies: Counter[int] = field(default_factory=Counter)  # seqs found more than once
    txn_visible: Counter[int] = field(default_factory=Counter)

    def add(self, seq: int, partition: int, offset: int, txn: int) -> bool:
        """Record one read-back copy; False if this seq was found before."""
        where = self.where
        if seq >= len(where):
            where.extend([_SEEN_NONE] * (seq + 1 - len(where) + 4096))
        if where[seq] != _SEEN_NONE:
            self.copies[seq] += 1
            return False
        where[seq] = (partition << 40) | offset
        if txn:
            self.txn_visible[txn] += 1
        return True

    def at(self, seq: int) -> tuple[int, int] | None:
        if seq >= len(self.where) or self.where[seq] == _SEEN_NONE:
            return None
        v = self.where[seq]
        return v >> 40, v & ((1 << 40) - 1)


class ReadBack:
    """The consumer side: every record of the topic, by incarnation."""

    def __init__(self, config: dict[str, Any]) -> None:
        from confluent_kafka import Consumer

        from tests.soak.worker import confluent_security

        self.topic = config["topic"]
        self.consumer = Consumer({
            "bootstrap.servers": config["bootstrap"], "group.id": "soak-checker",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "enable.partition.eof": False,
            "log_level": 0, **confluent_security(config["security"]),
        })  # fmt: skip
        self.seen: dict[tuple[int, int], Seen] = defaultdict(Seen)
        self.last_seq: dict[tuple[int, int, int], int] = {}
        self.reordered: list[str] = []
        self.reordered_count = 0
        self.phantom_unparseable = 0
        self.records = 0
        self.partitions = 0
        self.next_offset: dict[int, int] = {}

    def assign_new_partitions(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        try:
            meta = self.consumer.list_topics(self.topic, timeout=5)
        except Exception:  # noqa: BLE001 - a broker fault: try again later
            return
        found = meta.topics.get(self.topic)
        if found is None or found.error is not None:
            return
        count = len(found.partitions)
        if count > self.partitions:
            new = [TopicPartition(self.topic, p, OFFSET_BEGINNING)
                   for p in range(self.partitions, count)]  # fmt: skip
            self.consumer.incremental_assign(new)
            self.partitions = count

    def poll(self, timeout: float) -> int:
        messages = self.consumer.consume(10_000, timeout)
        header = VALUE_HEADER
        seen, last_seq = self.seen, self.last_seq
        for m in messages:
            if m.error() is not None:
                continue
            partition, offset, data = m.partition(), m.offset(), m.value()
            self.next_offset[partition] = offset + 1
            if data is None or len(data) < header.size:
                self.phantom_unparseable += 1
                continue
            worker, incarnation, seq, txn, _ = header.unpack_from(data)
            self.records += 1
            seen[(worker, incarnation)].add(seq, partition, offset, txn)
            key = (worker, incarnation, partition)
            before = last_seq.get(key, -1)
            if seq < before:
                self.reordered_count += 1
                if len(self.reordered) < EXAMPLES:
                    self.reordered.append(f"w{worker} i{incarnation} p{partition}: seq {seq} "
                                          f"at offset {offset} after seq {before}")  # fmt: skip
            else:
                last_seq[key] = seq
        return len(messages)

    def caught_up(self) -> bool:
        from confluent_kafka import TopicPartition

        for p in range(self.partitions):
            try:
                _, high = self.consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=5
                )
            except Exception:  # noqa: BLE001 - a broker fault: not caught up yet
                return False
            position = self.consumer.position([TopicPartition(self.topic, p)])[0].offset
            if max(position, self.next_offset.get(p, 0)) < high:
                return False
        return True


@dataclass
class Incarnation:
    worker: int
    incarnation: int
    intents: list[tuple[int, int]] = field(default_factory=list)
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    outcomes: Counter[int] = field(default_factory=Counter)
    failed: set[int] = field(default_factory=set)
    refused: set[int] = field(default_factory=set)
    unresolved: set[int] = field(default_factory=set)
    txn_of_range: dict[int, tuple[int, int]] = field(default_factory=dict)  # txn → its seqs
    txn_end: dict[int, int] = field(default_factory=dict)  # txn → last txn entry kind
    full: int = 0
    clean: bool = False


def load(path: str) -> Incarnation:
    name = os.path.basename(path)
    match = re.fullmatch(r"w(\d+)-i(\d+)\.hist", name)
    assert match, name
    inc = Incarnation(int(match[1]), int(match[2]))
    open_txn = 0
    for e in read_history(path):
        if e.kind == INTENT:
            inc.intents.append((e.seq, e.offset))
            if open_txn:
                inc.txn_of_range[open_txn] = (e.seq, e.offset)
                open_txn = 0
        elif e.kind == ACKED:
            inc.outcomes[e.seq] += 1
            inc.acked[e.seq] = (e.partition, e.offset)
        elif e.kind == FAILED:
            inc.outcomes[e.seq] += 1
            inc.failed.add(e.seq)
        elif e.kind == REFUSED:
            inc.refused.add(e.seq)
        elif e.kind == UNRESOLVED:
            inc.unresolved.add(e.seq)
        elif e.kind == FULL:
            inc.full += 1
        elif e.kind == CLEAN_END:
            inc.clean = True
        elif e.kind == TXN_BEGIN:
            open_txn = e.offset
            inc.txn_end[e.offset] = TXN_BEGIN
        elif e.kind in (TXN_COMMITTING, TXN_COMMITTED, TXN_ABORTED):
            inc.txn_end[e.offset] = e.kind
    return inc


def classify(read: ReadBack, directory: str, modes: dict[int, str]) -> dict[str, Any]:
    """The verdict: counts and examples of every class (module docstring)."""
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = defaultdict(list)

    def defect(kind: str, text: str, n: int = 1) -> None:
        counts[kind] += n
        if len(examples[kind]) < EXAMPLES:
            examples[kind].append(text)

    known: set[tuple[int, int]] = set()
    for path in sorted(glob.glob(os.path.join(directory, "w*-i*.hist"))):
        inc = load(path)
        key = (inc.worker, inc.incarnation)
        known.add(key)
        seen = read.seen.get(key, Seen())
        mode = modes.get(inc.worker, "?")
        counts["intended"] += sum(end - start for start, end in inc.intents)
        counts["acknowledged"] += len(inc.acked)
        counts["failed"] += len(inc.failed)
        counts["refused"] += len(inc.refused)
        counts["pool_full_waits"] += inc.full
        counts["incarnations"] += 1
        counts["clean_ends"] += inc.clean
        in_txn = {s for a, b in inc.txn_of_range.values() for s in range(a, b)}
        for seq, n in inc.outcomes.items():
            if n > 1:
                defect("resolved_twice", f"w{inc.worker} i{inc.incarnation} seq {seq}: {n}")
        for seq in inc.unresolved:
            defect("hung", f"w{inc.worker} i{inc.incarnation} seq {seq} never resolved")
        for seq, (partition, offset) in inc.acked.items():
            if seq in in_txn:
                continue
            found = seen.at(seq)
            if found is None:
                defect("lost", f"w{inc.worker} i{inc.incarnation} seq {seq} acked at "
                               f"{partition}/{offset}, not read back")  # fmt: skip
            elif found != (partition, offset):
                defect("ack_mismatch", f"w{inc.worker} i{inc.incarnation} seq {seq} acked "
                                       f"at {partition}/{offset}, found at {found}")  # fmt: skip
        for seq in inc.failed:
            if seen.at(seq) is not None:
                counts["failed_yet_written"] += 1
        for seq, copies in seen.copies.items():
            defect("duplicated", f"w{inc.worker} i{inc.incarnation} seq {seq}: {copies + 1} "
                                 "copies", copies)  # fmt: skip
        intended = bytearray(len(seen.where))
        for start, end in inc.intents:
            for s in range(start, min(end, len(intended))):
                intended[s] = 1
        for seq in range(len(seen.where)):
            if seen.where[seq] != _SEEN_NONE and (not intended[seq] or seq in inc.refused):
                defect("phantom", f"w{inc.worker} i{inc.incarnation} seq {seq}: never sent")
        if mode == "fire" and inc.clean:
            for start, end in inc.intents:
                for seq in range(start, end):
                    if seen.at(seq) is None and seq not in inc.refused:
                        defect("fire_and_forget_absent",
                               f"w{inc.worker} i{inc.incarnation} seq {seq}")  # fmt: skip
        if mode in ("future", "callback", "txn") and inc.clean:
            resolved = inc.outcomes.keys() | inc.unresolved | inc.refused
            for start, end in inc.intents:
                for seq in range(start, end):
                    if seq not in resolved:
                        defect("hung", f"w{inc.worker} i{inc.incarnation} seq {seq}: no "
                                       "outcome at a clean stop")  # fmt: skip
        for txn, (start, end) in inc.txn_of_range.items():
            visible, size = seen.txn_visible.get(txn, 0), end - start
            state = inc.txn_end.get(txn)
            counts["transactions"] += 1
            where = f"w{inc.worker} i{inc.incarnation} txn {txn}: {visible}/{size} visible"
            if state == TXN_COMMITTED:
                counts["txn_committed"] += 1
                if visible != size:
                    defect("lost", where + " (committed)", size - visible)
            elif state == TXN_ABORTED:
                counts["txn_aborted"] += 1
                if visible:
                    defect("phantom", where + " (aborted)", visible)
            else:
                counts["txn_unfinished"] += 1
                counts["txn_unfinished_committed"] += visible == size
                if visible not in (0, size):
                    defect("txn_partial", where + " (unfinished)")
    for key, seen in read.seen.items():
        if key not in known:
            n = sum(1 for v in seen.where if v != _SEEN_NONE)
            defect("phantom", f"w{key[0]} i{key[1]}: {n} records of no incarnation", n)
    counts["read_back"] = read.records
    counts["reordered"] = read.reordered_count
    examples["reordered"] = read.reordered
    if read.phantom_unparseable:
        defect("phantom", "records too short to be ours", read.phantom_unparseable)
    for kind in ("lost", "duplicated", "reordered", "phantom", "hung", "resolved_twice",
                 "ack_mismatch", "txn_partial", "fire_and_forget_absent"):  # fmt: skip
        counts.setdefault(kind, 0)
    return {"counts": dict(counts), "examples": {k: v for k, v in examples.items() if v}}


def main(path: str) -> int:
    with open(path) as f:
        config = json.load(f)
    directory = config["dir"]
    read = ReadBack(config)
    last_assign = 0.0
    while not os.path.exists(os.path.join(directory, "final")):
        if time.monotonic() - last_assign > 2:
            read.assign_new_partitions()
            last_assign = time.monotonic()
        read.poll(0.5)
    with open(os.path.join(directory, "final")) as f:
        partitions = json.load(f)["partitions"]  # (the broker's count, at the end)
    deadline = time.monotonic() + config.get("final_read_s", 300)
    caught = False
    while time.monotonic() < deadline:
        if read.partitions < partitions:
            # (again until it has them all: a metadata read may fail under a fault, and
            # librdkafka may answer from metadata older than the last growth)
            read.assign_new_partitions()
        if read.poll(1.0) == 0 and read.partitions >= partitions and read.caught_up():
            caught = True
            break
    read.consumer.close()
    modes = {int(k): v for k, v in config["modes"].items()}
    verdict = classify(read, directory, modes)
    verdict["caught_up"] = caught
    verdict["partitions"] = read.partitions
    with open(os.path.join(directory, "verdict.json"), "w") as f:
        json.dump(verdict, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
