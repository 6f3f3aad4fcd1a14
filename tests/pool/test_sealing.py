"""The Sender's sealing of a node's batches into a produce request's body:
``FastAppend.seal_request`` (C) and its twin ``sealing.seal_request`` (Python), each on its
own pool made alike, holding the same records. Both must give the same body and sizes and
leave the same bytes in shared memory; and the body must be a ProduceRequest whose batches
hold, by their CRCs, the records appended."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmkafka.pool import fastpath, sealing
from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol import compression
from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.messages import ProduceRequest
from shmkafka.protocol.messages.produce import request_head, topic_prefix
from shmkafka.protocol.records import HEADER_SIZE, TRANSACTIONAL_BIT, crc32c, decode_batch
from shmkafka.shm.config import SLAB_SIZE, PoolConfig
from shmkafka.shm.layout import B_SLAB_COUNT, B_WRITE_POS, IN_FLIGHT
from tests.appending import append
from tests.pool.twin_pools import segment_bytes, twin_pools

pytestmark = pytest.mark.skipif(fastpath.FastAppend is None, reason="C fast path not built")

CONFIG = PoolConfig(batch_size=256 * 1024, buffer_memory=96 * SLAB_SIZE, max_topics=2,
                    max_partitions=4, max_processes=4, lock_stripes=2)  # fmt: skip
TOPICS = {"a": 2, "b": 1}
LZ4 = int(CompressionType.LZ4)


@pytest.fixture
def pools() -> Iterator[tuple[SharedPool, SharedPool]]:
    yield from twin_pools("seal", CONFIG, TOPICS)


def _fill(pool: SharedPool, records: dict[tuple[str, int], list[bytes]]) -> list[DrainedBatch]:
    """The records appended (in Python: the same bytes on both pools), then drained."""
    acc = RecordAccumulator(pool, max_block_ms=100, fast_path=False)
    for (topic, partition), values in records.items():
        for i, value in enumerate(values):
            append(acc, topic, partition, 1_000 + i, b"k%d" % i, value, now_ms=5 + i)
    batches = []
    for state in acc.partition_states():  # (every batch: a partition may hold several)
        while drained := acc.drain([state.deque_id], 1 << 30):
            batches += drained
    return batches


def _topics(
    batches: list[DrainedBatch], flexible: bool, epoch: int,
    ahead: tuple[SharedPool, int] | None = None,
) -> list[sealing.Topic]:  # fmt: skip
    """The rows of ``batches`` by topic; with ``ahead`` (a pool and a codec), each with its
    records compressed already, as the compression threads give them."""
    by_topic: dict[str, list[sealing.Row | sealing.Compressed]] = {}
    for n, batch in enumerate(batches):
        attributes = TRANSACTIONAL_BIT * (n % 2)
        row: sealing.Row | sealing.Compressed = (
            batch.batch_id, batch.partition, 7_000 + n, epoch, 11 * n, attributes
        )  # fmt: skip
        if ahead is not None:
            pool, codec = ahead
            records = pool.batches.data(batch.info)[HEADER_SIZE:]
            parts = compression.compress_parts(CompressionType(codec), records)
            row = (*row[:6], parts)
        by_topic.setdefault(batch.topic, []).append(row)
    return [(topic_prefix(t, len(rows), flexible), rows) for t, rows in by_topic.items()]


VALUES = st.one_of(
    st.binary(max_size=300),
    st.binary(min_size=1, max_size=8).map(lambda b: b * 5_000),  # (runs: lz4 compresses)
    st.integers(0, 2**32).map(lambda n: bytes((n * i >> 7) & 0xFF for i in range(35_000))),
)
RECORDS = st.dictionaries(  # (at most 3 x 4 x 40 KB: the pool holds 1.5 MB)
    st.sampled_from([("a", 0), ("a", 1), ("b", 0)]),
    st.lists(VALUES, min_size=1, max_size=4),
    min_size=1,
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(records=RECORDS, codec=st.sampled_from([0, LZ4, 1, 2, 4]), flexible=st.booleans(),
       level=st.sampled_from([0, 1, 3, 9]), epoch=st.integers(-(2**15), 2**15 - 1),
       ahead=st.booleans())  # fmt: skip
def test_c_seals_what_its_python_twin_seals(
    pools: tuple[SharedPool, SharedPool], records: dict[tuple[str, int], list[bytes]],
    codec: int, flexible: bool, level: int, epoch: int, ahead: bool,
) -> None:  # fmt: skip
    """Every codec: lz4 compressed by C, or any codec's parts compressed ahead (the rows of
    gzip, snappy and zstd always come with theirs: C compresses lz4 only)."""
    c_pool, py_pool = pools
    c_batches, py_batches = _fill(c_pool, records), _fill(py_pool, records)
    ahead = codec != 0 and (ahead or codec != LZ4)
    try:
        _check_seal(pools, records, codec, flexible, level, epoch, c_batches, py_batches,
                    ahead)  # fmt: skip
    finally:  # (their memory back, for the next example)
        for pool, batches in ((c_pool, c_batches), (py_pool, py_batches)):
            acc = RecordAccumulator(pool, fast_path=False)
            for batch in batches:
                acc.complete(batch)


def _check_seal(
    pools: tuple[SharedPool, SharedPool], records: dict[tuple[str, int], list[bytes]],
    codec: int, flexible: bool, level: int, epoch: int, c_batches: list[DrainedBatch],
    py_batches: list[DrainedBatch], ahead: bool,
) -> None:  # fmt: skip
    c_pool, py_pool = pools
    assert [b.batch_id for b in c_batches] == [b.batch_id for b in py_batches]
    fast = RecordAccumulator(c_pool, fast_path=False, c_drain=True).drain_fast
    assert fast is not None and sealing.lz4_in_c(fast, level)
    topics = _topics(c_batches, flexible, epoch, (c_pool, codec) if ahead else None)
    head = request_head("tx" if epoch % 2 else None, -1, 30_000, len(topics), flexible)
    c_pieces, c_sizes = fast.seal_request(flexible, head, topics, codec, level, crc32c())
    py_pieces, py_sizes = sealing.seal_request(py_pool, flexible, head, topics, codec, level)
    body = b"".join(c_pieces)
    assert body == b"".join(py_pieces) and c_sizes == py_sizes
    assert segment_bytes(c_pool) == segment_bytes(py_pool)
    # and the body is the request a broker reads, its batches whole and sealed
    version = 9 if flexible else 8
    request = ProduceRequest.decode(body, version)
    assert request.acks == -1 and request.transactional_id == ("tx" if epoch % 2 else None)
    rows = iter([row for _, rs in topics for row in rs])  # (in the body's order)
    read: dict[tuple[str, int], list[bytes | None]] = {}
    for topic in request.topic_data:
        for part in topic.partition_data:
            assert isinstance(part.records, bytes | memoryview)
            batch = decode_batch(bytes(part.records))  # (its CRC checked)
            row = next(rows)
            assert row[1] == part.index and batch.header.compression == codec
            assert (batch.header.producer_id, batch.header.producer_epoch) == (row[2], epoch)
            assert batch.header.base_sequence == row[4]
            assert batch.header.is_transactional == bool(row[5])
            read.setdefault((topic.name, part.index), []).extend(r.value for r in batch.records)
            assert c_pool.batches.state(row[0]) == IN_FLIGHT
            assert c_pool.batches.read(row[0]).base_sequence == row[4]
    assert read == records


def test_a_descriptor_that_holds_no_batch_is_refused_by_both(
    pools: tuple[SharedPool, SharedPool],
) -> None:
    c_pool, py_pool = pools
    records = {("a", 0): [b"x" * 100]}
    ((c_batch,), (py_batch,)) = _fill(c_pool, records), _fill(py_pool, records)
    fast = RecordAccumulator(c_pool, fast_path=False, c_drain=True).drain_fast
    assert fast is not None
    topics = _topics([c_batch], False, 0)
    head = request_head(None, 1, 1_000, 1, False)
    for field, value in ((B_WRITE_POS, 3 * SLAB_SIZE), (B_WRITE_POS, 61), (B_SLAB_COUNT, 10**6)):
        for pool in pools:
            pool.segment.store_u32(pool.layout.batch_at(c_batch.batch_id) + field, value)
        with pytest.raises(ValueError, match="does not hold a batch"):
            fast.seal_request(False, head, topics, 0, 0, crc32c())
        with pytest.raises(ValueError, match="does not hold a batch"):
            sealing.seal_request(py_pool, False, head, topics, 0, 0)
        assert segment_bytes(c_pool) == segment_bytes(py_pool)  # (nothing written by either)
        for pool, batch in ((c_pool, c_batch), (py_pool, py_batch)):
            info = batch.info
            pool.segment.store_u32(pool.layout.batch_at(info.batch_id) + B_WRITE_POS,
                                   info.write_pos)  # fmt: skip
            pool.segment.store_u32(pool.layout.batch_at(info.batch_id) + B_SLAB_COUNT,
                                   info.slab_count)  # fmt: skip


def test_bad_arguments_are_refused_before_anything_is_written(
    pools: tuple[SharedPool, SharedPool],
) -> None:
    pool = pools[0]
    (batch,) = _fill(pool, {("a", 0): [b"x"]})
    fast = RecordAccumulator(pool, fast_path=False, c_drain=True).drain_fast
    assert fast is not None
    before = segment_bytes(pool)
    good = (batch.batch_id, 0, 1, 0, 0, 0)
    bad_rows = [
        (pool.config.num_slabs, 0, 1, 0, 0, 0),  # no such batch
        (batch.batch_id, 2**31, 1, 0, 0, 0),  # partition past int32
        (batch.batch_id, 0, 1, 2**15, 0, 0),  # epoch past int16
        (batch.batch_id, 0, 1, 0, 0),  # a field short
        (batch.batch_id, 0, 1, 0, "0", 0),  # not an int
    ]
    for row in bad_rows:
        with pytest.raises((ValueError, TypeError)):
            fast.seal_request(False, b"", [(b"", [row])], 0, 0, crc32c())  # type: ignore[list-item]
    with pytest.raises(ValueError, match="codec 2"):
        fast.seal_request(False, b"", [(b"", [good])], 2, 0, crc32c())
    with pytest.raises(TypeError):
        fast.seal_request(False, "head", [(b"", [good])], 0, 0, crc32c())  # type: ignore[arg-type]
    assert segment_bytes(pool) == before


def test_c_lz4_frames_are_compression_pys_frames() -> None:
    """lz4 from the package's own library: the same bytes as lz4.frame's, at the edges of
    its 64 KiB blocks and at the levels that change its coder (fast, high)."""
    pool = SharedPool.open(f"seal{uuid.uuid4().hex[:12]}", CONFIG)
    try:
        fast = RecordAccumulator(pool, fast_path=False, c_drain=True).drain_fast
        assert fast is not None and sealing.lz4_loaded()
        noise = bytes((i * 2654435761 >> 13) & 0xFF for i in range(200_000))
        for size in (1, 65_535, 65_536, 65_537, 131_072, 200_000):
            for level in (0, 2, 3, 12):
                data = (noise[: size // 2] + b"abc" * size)[:size]
                frame = fast.lz4_frame(data, level)
                assert frame == compression.compress(CompressionType.LZ4, data, level)
                assert compression.decompress(CompressionType.LZ4, frame) == data
    finally:
        pool.destroy()


def test_the_sender_seals_in_c_where_it_can(pools: tuple[SharedPool, SharedPool]) -> None:
    pool = pools[0]
    fast = RecordAccumulator(pool, fast_path=False, c_drain=True).drain_fast
    for codec, in_c in ((0, True), (LZ4, True), (int(CompressionType.GZIP), False),
                        (int(CompressionType.ZSTD), False)):  # fmt: skip
        assert sealing.Sealer(pool, fast, codec, None).compresses == in_c
