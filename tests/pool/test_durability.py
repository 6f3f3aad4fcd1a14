"""Commit records and group commit (pool/durability.py), on a durable pool in a directory of
the test's (the power cuts themselves are tests/powercut's)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.durability import CommitRecord, latest, read_commit
from shmkafka.pool.errors import DurabilityTimeoutError
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.layout import COMMIT, COMMIT_DONE, COMMIT_LIVE, Layout
from tests.appending import append
from tests.conftest import SMALL, publish


@pytest.fixture
def durable(pool_name: str, tmp_path: Path) -> Iterator[SharedPool]:
    config = dataclasses.replace(SMALL, pool_dir=str(tmp_path), pool_durability="sync")
    pool = SharedPool.open(pool_name, config)
    try:
        yield pool
    finally:
        pool.destroy()


def _records(pool: SharedPool, batch_id: int) -> list[CommitRecord | None]:
    return [read_commit(pool.segment.buf, pool.layout.commit_at(batch_id, c), c) for c in (0, 1)]


def test_a_memory_pool_has_no_commit_records(pool: SharedPool) -> None:
    assert pool.committer is None
    layout = pool.layout
    assert layout.slabs_at - layout.commits_at < 4096 and layout.drecs_at + 4096 > layout.batches_at
    durable = Layout.for_config(dataclasses.replace(pool.config, pool_dir="/d",
                                                    pool_durability="flush"))  # fmt: skip
    assert durable.slabs_at - durable.commits_at >= 2 * COMMIT.size * pool.config.num_slabs


def test_the_pool_file_lives_in_its_directory_behind_a_dev_shm_link(
    durable: SharedPool, tmp_path: Path, pool_name: str
) -> None:
    path = tmp_path / f"shmkafka.{pool_name}"
    assert path.stat().st_mode & 0o777 == 0o600
    assert Path(f"/dev/shm/shmkafka.{pool_name}").resolve() == path
    other = SharedPool.open(pool_name)  # (attached by its name alone)
    other.detach()


def test_a_commit_records_each_change_in_the_other_copy(durable: SharedPool) -> None:
    publish(durable, {"t": 1})
    acc = RecordAccumulator(durable, max_block_ms=100)
    first = append(acc, "t", 0, 1000, b"k", b"v1", now_ms=1)
    committer = durable.committer
    assert committer is not None
    number = committer.commit()
    one = latest(_records(durable, first.batch_id))
    assert one is not None and (one.number, one.state, one.record_count) == (number, COMMIT_LIVE, 1)
    assert committer.commit() == number + 1  # nothing changed: nothing written
    assert latest(_records(durable, first.batch_id)) == one
    append(acc, "t", 0, 1001, b"k", b"v2", now_ms=2)
    committer.commit()
    two = latest(_records(durable, first.batch_id))
    assert two is not None and two.record_count == 2 and two.copy == 1 - one.copy
    assert _records(durable, first.batch_id)[one.copy] == one  # the older copy stays whole


def test_a_torn_copy_fails_its_crc(durable: SharedPool) -> None:
    publish(durable, {"t": 1})
    first = append(RecordAccumulator(durable, max_block_ms=100), "t", 0, 1, None, b"v", now_ms=1)
    assert durable.committer is not None
    durable.committer.commit()
    record = latest(_records(durable, first.batch_id))
    assert record is not None
    at = durable.layout.commit_at(first.batch_id, record.copy)
    durable.segment.buf[at + COMMIT.size // 2] ^= 0xFF
    assert read_commit(durable.segment.buf, at, record.copy) is None


def test_a_finished_batch_goes_done_in_the_commit_that_frees_it(durable: SharedPool) -> None:
    publish(durable, {"t": 1})
    acc = RecordAccumulator(durable, max_block_ms=100)
    first = append(acc, "t", 0, 1, None, b"v", now_ms=1)
    (state,) = acc.partition_states()
    (batch,) = acc.drain([state.deque_id], 1 << 20)
    assert durable.committer is not None
    durable.committer.commit([(batch.batch_id, batch.info.generation)])
    record = latest(_records(durable, first.batch_id))
    assert record is not None and record.state == COMMIT_DONE
    acc.complete(batch)


def test_wait_durable_waits_for_a_commit_that_started_after_it(durable: SharedPool) -> None:
    committer = durable.committer
    assert committer is not None
    before = committer.done()
    assert committer.wait_durable(10) == before + 1 and committer.done() == before + 1
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(committer.wait_durable(10)))
               for _ in range(8)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 8 and all(r > before + 1 for r in results)
    assert committer.done() >= max(results)


def test_wait_durable_gives_up_with_a_typed_error_when_no_commit_can_finish(
    durable: SharedPool,
) -> None:
    """A commit that hangs (a disk that does not answer its msync) holds the commit lock:
    a sync send waits max_block_ms for it, then says the record is not known durable."""
    committer = durable.committer
    assert committer is not None
    holding, release = threading.Event(), threading.Event()

    def hung_commit() -> None:
        with committer.held():
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hung_commit)
    holder.start()
    try:
        assert holding.wait(10)
        started = time.monotonic()
        with pytest.raises(DurabilityTimeoutError, match="not known to be durable"):
            committer.wait_durable(0.2)
        assert 0.2 <= time.monotonic() - started < 5
    finally:
        release.set()
        holder.join(10)
    assert committer.wait_durable(10) == committer.done()  # (and works once the disk does)
