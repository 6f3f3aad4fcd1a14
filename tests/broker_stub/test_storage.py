"""broker_stub's durable log: segments and sparse indexes, recovery (torn tails, lost or
stale indexes, leftovers), retention by whole segments, group commit, and a kill -9 of a
real stub process with --flush sync: every acknowledged record survives."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import confluent_kafka

from shmkafka.broker_stub.flush import Flusher
from shmkafka.broker_stub.log import PartitionLog
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.broker_stub.storage import DiskLog, StorageConfig, scan
from shmkafka.broker_stub.validate import split_batches
from shmkafka.perf.brokers import free_port
from shmkafka.protocol.records import build_batch, decode_batches
from tests.integration.kafka_io import consume_all

SMALL = StorageConfig(segment_bytes=4000, index_interval_bytes=300)


def _fill(directory: Path, batches: int, config: StorageConfig = SMALL) -> PartitionLog:
    log = PartitionLog(DiskLog(str(directory), config, 0))
    rng = random.Random(7)
    for i in range(batches):
        count = rng.randint(1, 5)
        data = build_batch([(1000 * i + k, b"k", b"v%d-%d" % (i, k), []) for k in range(count)])
        ((header, raw),) = split_batches(data)  # type: ignore[misc]
        log.append_as_leader(raw, header, 0, None)
    log.hw = log.leo
    return log


def _offsets(data: bytes) -> list[int]:
    return [r.offset for b in decode_batches(data) for r in b.records]


def test_index_lookups_equal_a_linear_scan(tmp_path: Path) -> None:
    log = _fill(tmp_path, 300)
    assert log.disk is not None and len(log.disk.segments) > 5  # it rolled
    memory = {b.base_offset: b.data for b in log.batches}
    for offset in random.Random(3).sample(range(log.leo), 200):
        expected = next(b.data for b in log.batches if b.base_offset <= offset <= b.last_offset)
        got = log.read(offset, 1, log.leo)  # one batch: the one holding offset
        assert got == expected, offset
        assert got in memory.values()
    everything = log.read(0, 1 << 30, log.leo)
    assert _offsets(everything) == list(range(log.leo))
    log.disk.close()


def test_a_read_stopped_by_max_bytes_does_not_skip_to_the_next_segment(tmp_path: Path) -> None:
    """Found by the soak: a fetch that stopped inside a segment (the next batch did not fit
    in max_bytes) went on with the next segment's first batch, so a consumer reading at
    the offset after it skipped the rest of the segment."""
    log = _fill(tmp_path, 300)
    assert log.disk is not None and len(log.disk.segments) > 5
    sizes = [len(b.data) for b in log.batches]
    for max_bytes in (min(sizes), 2 * max(sizes), 700, 1500):
        offset, read = 0, []
        while offset < log.leo:
            got = _offsets(log.read(offset, max_bytes, log.leo))
            assert got, offset
            read += [o for o in got if o >= offset]
            offset = got[-1] + 1
        assert read == list(range(log.leo)), max_bytes  # every offset, none skipped
    log.disk.close()


def test_recovery_cuts_a_torn_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    log = _fill(tmp_path, 60)
    leo = log.leo
    assert log.disk is not None
    last = log.disk.segments[-1]
    log.disk.fsync()
    log.disk.close()
    with open(last.log_path, "ab") as f:  # a batch cut short by the crash
        f.write(build_batch([(1, b"k", b"torn" * 50, [])])[:-20])
    os.remove(log.disk.segments[0].index_path)  # and a lost index
    with open(log.disk.segments[1].index_path, "ab") as f:
        f.write(b"\x01\x02\x03")  # and a torn one
    Path(tmp_path, "00000000000000000000.log.deleted").write_bytes(b"leftover")
    again = PartitionLog(DiskLog(str(tmp_path), SMALL, 0))
    assert again.leo == leo  # nothing past the torn tail
    assert _offsets(again.read(0, 1 << 30, again.leo)) == list(range(leo))
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path))
    assert again.disk is not None
    assert again.disk.segments[0].index  # rebuilt
    assert os.path.getsize(again.disk.segments[1].index_path) % 8 == 0
    corrupt = again.disk.segments[-1]
    again.disk.close()
    raw = bytearray(Path(corrupt.log_path).read_bytes())
    last_batch = list(scan(bytes(raw)))[-1]
    raw[last_batch.position + last_batch.size - 1] ^= 0xFF  # a CRC mismatch in the last batch
    Path(corrupt.log_path).write_bytes(bytes(raw))
    third = PartitionLog(DiskLog(str(tmp_path), SMALL, 0))
    assert third.leo == last_batch.base_offset
    assert third.disk is not None
    third.disk.close()


def test_retention_deletes_whole_segments_only(tmp_path: Path) -> None:
    config = StorageConfig(segment_bytes=4000, index_interval_bytes=300, retention_bytes=9000)
    log = _fill(tmp_path, 200, config)
    assert log.disk is not None
    bases_before = [s.base_offset for s in log.disk.segments]
    log.apply_retention(0)
    bases_after = [s.base_offset for s in log.disk.segments]
    assert bases_after == bases_before[-len(bases_after) :] and len(bases_after) < len(bases_before)
    assert log.log_start == bases_after[0] and log.disk.size() >= 9000 - 4000
    assert _offsets(log.read(log.log_start, 1 << 30, log.leo))[0] == log.log_start
    old = StorageConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=1000)
    timed = _fill(tmp_path / "timed", 50, old)  # record timestamps are ~1970: all old
    timed.apply_retention(int(time.time() * 1000))
    assert timed.disk is not None and len(timed.disk.segments) == 1  # never the active one
    log.disk.close()
    timed.disk.close()


def test_group_commit_completes_waiting_requests_with_one_fsync(tmp_path: Path) -> None:
    """Requests that arrive while the flusher is busy share its next round: one fsync."""
    log = _fill(tmp_path, 5)
    assert log.disk is not None
    flusher = Flusher("sync", 1000, True, lambda: [])
    done: list[int] = []
    with flusher._cond:  # the flusher cannot swap the lists until all five are queued
        for i in range(5):
            flusher.commit([log.disk], lambda i=i: done.append(i))  # type: ignore[misc]
    deadline = time.monotonic() + 5
    while len(done) < 5:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert sorted(done) == [0, 1, 2, 3, 4]
    assert flusher.rounds == 1 and flusher.requests == 5 and flusher.fsyncs == 1
    baseline = Flusher("sync", 1000, False, lambda: [])
    with baseline._cond:
        for _ in range(5):
            baseline.commit([log.disk], lambda: None)
    deadline = time.monotonic() + 5
    while baseline.requests < 5:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert baseline.rounds == 5 and baseline.fsyncs == 5  # one fsync per request
    flusher.close()
    baseline.close()
    log.disk.close()


def test_group_commit_fsyncs_once_for_many_requests(tmp_path: Path) -> None:
    with BrokerStub(nodes=1, partitions=8, storage_dir=str(tmp_path), flush="sync") as stub:
        conf = {"bootstrap.servers": stub.bootstrap, "linger.ms": 0, "acks": "all"}
        producers = [confluent_kafka.Producer(conf) for _ in range(4)]
        for i in range(2000):
            producers[i % 4].produce("gc", b"v%d" % i, partition=i % 8)
        for p in producers:
            assert p.flush(30) == 0
        flusher = stub.flusher
        assert flusher is not None and flusher.requests > 0  # every ack waited for a commit
        got = consume_all(SimpleNamespace(bootstrap=stub.bootstrap), "gc", list(range(8)), 2000)
        assert len(got) == 2000
        first = confluent_kafka.Consumer(
            {"bootstrap.servers": stub.bootstrap, "group.id": "x", "enable.auto.commit": False}
        )
        first.assign([confluent_kafka.TopicPartition("gc", 3, 77)])  # an arbitrary offset
        msg = first.poll(10)
        assert msg is not None and msg.offset() == 77
        first.close()


def _start_stub(directory: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmkafka.broker_stub", "--port", str(port), "--partitions", "4",
         "--storage", str(directory), "--flush", "sync"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if b"broker_stub:" not in line:  # say why, and leave nothing behind
        proc.kill()
        rest = proc.stdout.read()
        proc.wait()
        proc.stdout.close()
        raise AssertionError((line + rest).decode(errors="replace"))
    return proc


def test_acked_records_survive_a_kill_9(tmp_path: Path) -> None:
    port = free_port()
    proc = _start_stub(tmp_path, port)
    acked: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "linger.ms": 2,
            "message.timeout.ms": 4000, "log_level": 0,
        })  # fmt: skip

        def report(err: Any, msg: Any) -> None:
            if err is None:
                acked.append(msg.value())

        i = 0
        while not stop.is_set():
            producer.produce("durable", b"v%d" % i, b"k%d" % i, on_delivery=report)
            producer.poll(0)
            i += 1
            if i % 200 == 0:
                time.sleep(0.005)
        producer.flush(6)

    thread = threading.Thread(target=produce)
    thread.start()
    deadline = time.monotonic() + 20
    while len(acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # mid-run, no chance to flush anything
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()
    stop.set()
    thread.join()
    assert len(acked) >= 3000
    proc = _start_stub(tmp_path, port)
    try:
        got = consume_all(SimpleNamespace(bootstrap=f"127.0.0.1:{port}"), "durable",
                          [0, 1, 2, 3], len(acked))  # fmt: skip
        values = [m.value() for m in got]
        assert set(acked) <= set(values)  # every acknowledged record is there
        assert len(values) == len(set(values))
    finally:
        proc.terminate()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()
