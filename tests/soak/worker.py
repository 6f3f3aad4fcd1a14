"""One soak producer process: ``python -m tests.soak.worker CONFIG.json``.

A worker drives one public API (kafka-python, confluent-kafka or aiokafka) in one mode:
``future`` (keeps futures and waits on them a few chunks behind), ``callback`` (a delivery
callback), ``fire`` (fire and forget) or ``txn`` (kafka-python transactions of a few records,
every fifth one aborted on purpose). It sends records in chunks, each announced by an intent
entry first (history.py), paced at the rate the harness sets on the board, and flushes every
few seconds. SIGTERM asks for a clean stop: flush, then every record still unresolved is
logged as such (a hung future), and the producer is closed.

Rules:
- The board (an mmap the harness shares) holds, per worker, the rate (records/s, 0: as fast
  as it goes), a burst counter and the worker's phase (so the nemesis can kill mid-flush).
- Nothing here catches an error it cannot name: a failure ends the process with a
  traceback on stderr, which the harness keeps.
"""

from __future__ import annotations

import asyncio
import collections
import json
import mmap
import os
import signal
import struct
import sys
import time
import traceback
from functools import partial
from typing import Any

from tests.soak.history import (
    ACKED,
    CLEAN_END,
    FAILED,
    FULL,
    REFUSED,
    TXN_ABORTED,
    TXN_BEGIN,
    TXN_COMMITTED,
    TXN_COMMITTING,
    UNRESOLVED,
    HistoryWriter,
    history_path,
    value,
)

# the board: one slot per worker
SLOT = struct.Struct("<IIB")  # rate, burst counter, phase
SLOT_SIZE = 16
BOARD_SIZE = 4096
IDLE, SENDING, FLUSHING, COMMITTING = 0, 1, 2, 3
CHUNK = 50
WINDOW = 8  # future mode: chunks in flight before the oldest is waited on (a chunk whose
# last future is done is settled at once)
FLUSH_EVERY_S = 3.0
TXN_RECORDS = 20


class Board:
    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, BOARD_SIZE)
        finally:
            os.close(fd)

    def read(self, worker: int) -> tuple[int, int]:
        rate, burst, _ = SLOT.unpack_from(self._map, worker * SLOT_SIZE)
        return rate, burst

    def set_rate(self, worker: int, rate: int) -> None:
        struct.pack_into("<I", self._map, worker * SLOT_SIZE, rate)

    def add_burst(self, worker: int) -> None:
        at = worker * SLOT_SIZE + 4
        struct.pack_into("<I", self._map, at, struct.unpack_from("<I", self._map, at)[0] + 1)

    def phase(self, worker: int) -> int:
        return self._map[worker * SLOT_SIZE + 8]

    def set_phase(self, worker: int, phase: int) -> None:
        self._map[worker * SLOT_SIZE + 8] = phase


def create_board(path: str) -> Board:
    with open(path, "wb") as f:
        f.write(b"\0" * BOARD_SIZE)
    return Board(path)


class Pacer:
    """Chunks at the board's rate; after a burst request, ``burst`` records unpaced."""

    def __init__(self, board: Board, worker: int, burst: int) -> None:
        self.board, self.worker, self.burst_size = board, worker, burst
        self._bursts_seen = board.read(worker)[1]
        self._burst_left = 0
        self._next = time.monotonic()

    def wait(self, n: int) -> None:
        delay = self.delay(n)
        if delay > 0:
            time.sleep(delay)

    def delay(self, n: int) -> float:
        """Seconds to wait before the next ``n`` records."""
        rate, bursts = self.board.read(self.worker)
        if bursts != self._bursts_seen:
            self._bursts_seen, self._burst_left = bursts, self.burst_size
        if self._burst_left > 0 or rate == 0:
            self._burst_left -= n
            self._next = time.monotonic()
            return 0.0
        self._next = max(self._next + n / rate, time.monotonic() - 1.0)
        return self._next - time.monotonic()


class Worker:
    def __init__(self, config: dict[str, Any]) -> None:
        self.c = config
        self.id, self.incarnation = config["worker"], config["incarnation"]
        self.topic = config["topic"]
        self.padding = b"x" * max(0, config["record_size"] - 24)
        self.history = HistoryWriter(
            history_path(config["dir"], self.id, self.incarnation), config["epoch"]
        )
        self.board = Board(config["board"])
        self.pacer = Pacer(self.board, self.id, config["burst"])
        self.stopping = False
        self.seq = 0
        self.pending: set[int] = set()  # seqs sent, no outcome yet (future and callback)
        self.errors_fd = os.open(
            history_path(config["dir"], self.id, self.incarnation) + ".errors",
            os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600,
        )  # fmt: skip
        signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def value(self, seq: int, txn: int = 0) -> bytes:
        return value(self.id, self.incarnation, seq, txn, self.padding)

    def phase(self, phase: int) -> None:
        self.board.set_phase(self.id, phase)

    def acked(self, seq: int, partition: int, offset: int, sent_us: int) -> None:
        self.pending.discard(seq)
        latency = max(0, int(time.time() * 1e6) - sent_us)
        self.history.note(ACKED, seq, partition, offset, latency)

    def failed(self, seq: int, error: object) -> None:
        self.pending.discard(seq)
        self.history.note(FAILED, seq)
        os.write(self.errors_fd, f"{seq} {type(error).__name__}: {error}\n".encode())

    def refused(self, seq: int, error: object) -> None:
        self.history.note(REFUSED, seq)
        os.write(self.errors_fd, f"{seq} refused {type(error).__name__}: {error}\n".encode())

    def record_sent(self, seq: int, sent_us: int, started: float, future: Any,
                    chunk: list[tuple[int, int, Any]]) -> None:  # fmt: skip
        """After a send call returned: note that it waited for a full pool; in future mode,
        keep the future in ``chunk`` for its outcome."""
        if time.monotonic() - started > 0.05:
            self.history.note(FULL, seq)
        if self.c["mode"] == "future":
            self.pending.add(seq)
            chunk.append((seq, sent_us, future))

    def unresolved(self) -> None:
        for seq in sorted(self.pending):
            self.history.note(UNRESOLVED, seq)

    def next_chunk(self, n: int = CHUNK, paced: bool = True) -> range:
        if paced:
            self.pacer.wait(n)
        start = self.seq
        self.seq += n
        self.history.intent(start, self.seq)
        return range(start, self.seq)

    def finish(self) -> None:
        self.unresolved()
        self.history.note(CLEAN_END, self.seq)
        self.history.close()
        self.phase(IDLE)


# ---------------------------------------------------------------------- security


KAFKA_PYTHON_SECURITY = ("security_protocol", "ssl_cafile", "sasl_mechanism",
                         "sasl_plain_username", "sasl_plain_password")  # fmt: skip
CONFLUENT_SECURITY = ("security.protocol", "ssl.ca.location", "sasl.mechanism",
                      "sasl.username", "sasl.password")  # fmt: skip


def _security(s: dict[str, Any] | None, names: tuple[str, ...]) -> dict[str, Any]:
    """The run's security settings under one API's names (the password read from its
    0600 file)."""
    if not s:
        return {}
    with open(s["password_file"]) as f:
        password = f.read().strip()
    values = (s["protocol"], s["cafile"], s["mechanism"], s["username"], password)
    return dict(zip(names, values, strict=True))


def kafka_python_security(s: dict[str, Any] | None) -> dict[str, Any]:
    return _security(s, KAFKA_PYTHON_SECURITY)


def confluent_security(s: dict[str, Any] | None) -> dict[str, Any]:
    return _security(s, CONFLUENT_SECURITY)


def aiokafka_security(s: dict[str, Any] | None) -> dict[str, Any]:
    if not s:
        return {}
    from shmkafka.aiokafka.helpers import create_ssl_context

    conf = kafka_python_security(s)
    conf["ssl_context"] = create_ssl_context(cafile=conf.pop("ssl_cafile"))
    return conf


# ---------------------------------------------------------------------- kafka-python


def one_pool(c: dict[str, Any], api: str) -> dict[str, Any]:
    """With ``one_pool`` in the config (the many-host run), what each API adds so that the
    three agree on every Sender-level setting and pool size, and share the host's pool (as
    docs/configuration.md shows)."""
    if not c.get("one_pool"):
        return {}
    if api == "confluent-kafka":
        return {"client.id": "hosts", "metadata.max.age.ms": 10_000,
                "message.max.bytes": 1_048_576, "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 1000}  # fmt: skip
    return {"client_id": "hosts", "batch_max_records": 10_000}


def kafka_python_producer(w: Worker, **extra: Any) -> Any:
    from shmkafka.kafka import KafkaProducer

    c = w.c
    return KafkaProducer(
        bootstrap_servers=c["bootstrap"], acks="all", enable_idempotence=True, linger_ms=5,
        request_timeout_ms=10_000, delivery_timeout_ms=120_000, metadata_max_age_ms=10_000,
        buffer_memory=c["buffer_memory"], max_block_ms=60_000,
        **kafka_python_security(c["security"]), **{**one_pool(c, "kafka-python"), **extra},
    )  # fmt: skip


def run_kafka_python(w: Worker) -> None:
    from shmkafka.kafka.errors import KafkaTimeoutError

    mode = w.c["mode"]
    p = kafka_python_producer(w, pool=w.c["pool"])
    window: collections.deque[list[tuple[int, int, Any]]] = collections.deque()
    last_flush = time.monotonic()

    def ok(seq: int, sent_us: int, metadata: Any) -> None:
        w.acked(seq, metadata.partition, metadata.offset, sent_us)

    def settle(chunk: list[tuple[int, int, Any]]) -> None:
        for seq, sent_us, future in chunk:
            try:
                metadata = future.get(timeout=300)
            except Exception as exc:  # noqa: BLE001 - every failure is logged, by name
                w.failed(seq, exc)
            else:
                w.acked(seq, metadata.partition, metadata.offset, sent_us)

    w.phase(SENDING)
    while not w.stopping:
        chunk: list[tuple[int, int, Any]] = []
        for seq in w.next_chunk():
            sent_us = int(time.time() * 1e6)
            started = time.monotonic()
            try:
                future = p.send(w.topic, w.value(seq))
            except KafkaTimeoutError as exc:  # (the pool stayed full for max_block_ms)
                w.refused(seq, exc)
                continue
            w.record_sent(seq, sent_us, started, future, chunk)
            if mode == "callback":
                w.pending.add(seq)
                future.add_callback(ok, seq, sent_us).add_errback(partial(w.failed, seq))
        if mode == "future":  # (the oldest chunk as soon as it is done: latency is true)
            window.append(chunk)
            while window and (len(window) > WINDOW or window[0][-1][2].is_done):
                settle(window.popleft())
        if time.monotonic() - last_flush > FLUSH_EVERY_S:
            w.phase(FLUSHING)
            p.flush()
            w.phase(SENDING)
            last_flush = time.monotonic()
    w.phase(FLUSHING)
    p.flush(timeout=120)
    while window:
        settle(window.popleft())
    p.close(timeout=30)
    w.finish()


def run_transactional(w: Worker) -> None:
    from shmkafka.kafka.errors import KafkaError

    p = kafka_python_producer(w, transactional_id=w.c["transactional_id"])
    p.init_transactions()
    txn = 0

    def ok(seq: int, sent_us: int, metadata: Any) -> None:
        w.acked(seq, metadata.partition, metadata.offset, sent_us)

    w.phase(SENDING)
    while not w.stopping:
        txn += 1
        p.begin_transaction()
        w.history.note(TXN_BEGIN, 0, 0, txn)
        doomed: KafkaError | None = None
        for seq in w.next_chunk(TXN_RECORDS):
            if doomed is not None:  # (the rest of the chunk is never sent)
                w.refused(seq, doomed)
                continue
            sent_us = int(time.time() * 1e6)
            try:
                future = p.send(w.topic, w.value(seq, txn))
            except KafkaError as exc:  # abortable (its Sender restarted, say): as kafka-
                doomed = exc  # python's, send() refuses too, and the transaction is aborted
                w.refused(seq, exc)
                continue
            w.pending.add(seq)
            future.add_callback(ok, seq, sent_us).add_errback(partial(w.failed, seq))
        w.phase(COMMITTING)
        try:
            if doomed is not None:
                raise doomed
            if txn % 5 == 0:
                p.abort_transaction()
                w.history.note(TXN_ABORTED, 0, 0, txn)
            else:
                w.history.note(TXN_COMMITTING, 0, 0, txn)
                w.history.flush()  # (a kill at the commit point must find this line written)
                p.commit_transaction()
                w.history.note(TXN_COMMITTED, 0, 0, txn)
        except KafkaError as exc:  # abortable: abort it and go on; fatal: raise
            os.write(w.errors_fd, f"txn {txn} {type(exc).__name__}: {exc}\n".encode())
            p.abort_transaction()
            w.history.note(TXN_ABORTED, 0, 0, txn)
        w.phase(SENDING)
    p.close(timeout=30)
    w.finish()


# ---------------------------------------------------------------------- confluent-kafka


def run_confluent(w: Worker) -> None:
    from shmkafka.confluent_kafka import Producer

    c, mode = w.c, w.c["mode"]
    p = Producer({
        "bootstrap.servers": c["bootstrap"], "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "request.timeout.ms": 10_000, "message.timeout.ms": 120_000,
        "topic.metadata.refresh.interval.ms": 10_000,
        "queue.buffering.max.kbytes": c["buffer_memory"] // 1024,
        "shmkafka.pool": c["pool"], **confluent_security(c["security"]),
        **one_pool(c, "confluent-kafka"),
    })  # fmt: skip

    def delivered(err: Any, msg: Any) -> None:
        seq, sent_us = struct.unpack_from("<4xIxxxxq", msg.value())
        if err is not None:
            w.failed(seq, err)
        else:
            w.acked(seq, msg.partition(), msg.offset(), sent_us)

    callback = delivered if mode == "callback" else None
    last_flush = time.monotonic()
    w.phase(SENDING)
    while not w.stopping:
        for seq in w.next_chunk():
            if callback is not None:
                w.pending.add(seq)
            full = False
            while True:
                try:
                    p.produce(w.topic, w.value(seq), on_delivery=callback)
                    break
                except BufferError:  # librdkafka's full queue: serve callbacks, try again
                    full = True
                    p.poll(0.01)
            if full:
                w.history.note(FULL, seq)
        p.poll(0)
        if time.monotonic() - last_flush > FLUSH_EVERY_S:
            w.phase(FLUSHING)
            p.flush()
            w.phase(SENDING)
            last_flush = time.monotonic()
    w.phase(FLUSHING)
    p.flush(120)
    w.finish()


# ---------------------------------------------------------------------- aiokafka


def run_aiokafka(w: Worker) -> None:
    asyncio.run(_aiokafka(w))


async def _aiokafka(w: Worker) -> None:
    from shmkafka.aiokafka import AIOKafkaProducer

    c, mode = w.c, w.c["mode"]
    p = AIOKafkaProducer(
        bootstrap_servers=c["bootstrap"], acks="all", enable_idempotence=True, linger_ms=5,
        request_timeout_ms=10_000, metadata_max_age_ms=10_000, pool=c["pool"],
        **aiokafka_security(c["security"]), **one_pool(c, "aiokafka"),
    )  # fmt: skip
    await p.start()
    window: collections.deque[list[tuple[int, int, Any]]] = collections.deque()

    async def settle(chunk: list[tuple[int, int, Any]]) -> None:
        for seq, sent_us, future in chunk:
            try:
                metadata = await future
            except Exception as exc:  # noqa: BLE001 - every failure is logged, by name
                w.failed(seq, exc)
            else:
                w.acked(seq, metadata.partition, metadata.offset, sent_us)

    last_flush = time.monotonic()
    w.phase(SENDING)
    while not w.stopping:
        delay = w.pacer.delay(CHUNK)
        await asyncio.sleep(max(0.0, delay))  # (the loop keeps delivering meanwhile)
        chunk: list[tuple[int, int, Any]] = []
        for seq in w.next_chunk(paced=False):
            sent_us = int(time.time() * 1e6)
            started = time.monotonic()
            future = await p.send(w.topic, w.value(seq))
            w.record_sent(seq, sent_us, started, future, chunk)
        if mode == "future":
            window.append(chunk)
            while window and (len(window) > WINDOW or window[0][-1][2].done()):
                await settle(window.popleft())
        if time.monotonic() - last_flush > FLUSH_EVERY_S:
            w.phase(FLUSHING)
            await p.flush()
            w.phase(SENDING)
            last_flush = time.monotonic()
    w.phase(FLUSHING)
    await p.flush()
    while window:
        await settle(window.popleft())
    await p.stop()
    w.finish()


RUNNERS = {"kafka-python": run_kafka_python, "confluent-kafka": run_confluent,
           "aiokafka": run_aiokafka}  # fmt: skip


def main(path: str) -> int:
    with open(path) as f:
        config = json.load(f)
    w = Worker(config)
    try:
        if config["mode"] == "txn":
            run_transactional(w)
        else:
            RUNNERS[config["api"]](w)
    except Exception:  # noqa: BLE001 - the traceback goes to the worker's log
        traceback.print_exc()
        w.history.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
