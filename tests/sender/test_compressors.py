"""The pieces of a request's batches compressed on worker threads: the same bytes, in
order, and only when it pays."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from shmkafka.protocol.compression import LZ4_BLOCK, CompressionType, compress, decompress
from shmkafka.protocol.records import (
    HEADER_SIZE,
    BatchMeta,
    decode_batch,
    encode_record_tail,
    finalize_batch,
    frame_record,
)
from shmkafka.sender.compressors import Compressors, _runs, usable_cores, workers_for

FACTS: dict[str, Any] = {"base_timestamp": 0, "max_timestamp": 0,
                         "meta": BatchMeta(compression=CompressionType.LZ4)}  # fmt: skip


def _batch(records: int) -> bytearray:
    body = b"".join(
        frame_record(i, i, encode_record_tail(b"%d" % i, b"event %d; " % i * 1500))
        for i in range(records)
    )
    return bytearray(HEADER_SIZE) + body


def _parts(buf: bytearray, records: int, map_blocks: Any = map) -> tuple[Any, ...]:
    return finalize_batch(
        buf, len(buf), record_count=records, last_offset_delta=records - 1,
        map_blocks=map_blocks, **FACTS,
    )  # fmt: skip


class _Seen(Compressors):
    """Compressors that note the threads the blocks ran on."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.threads: set[int] = set()

    def map(self, fn: Any, items: Any, sizes: Any = None) -> Any:
        def noted(item: Any) -> Any:
            self.threads.add(threading.get_ident())
            return fn(item)

        return super().map(noted, items, sizes)


def test_a_batchs_blocks_compressed_on_two_threads_make_the_same_batch() -> None:
    buf = _batch(60)
    assert len(buf) > 8 * LZ4_BLOCK
    compressors = _Seen(workers=1)
    try:
        parallel = _parts(bytearray(buf), 60, compressors.map)
    finally:
        compressors.close()
    assert compressors.parallel_batches == 1 and len(compressors.threads) == 2
    inline = _parts(bytearray(buf), 60)
    assert b"".join(parallel) == b"".join(inline)
    records = decode_batch(b"".join(parallel)).records  # (its CRC checked too)
    assert [r.key for r in records] == [b"%d" % i for i in range(60)]
    assert records[59].value == b"event 59; " * 1500


@pytest.mark.parametrize(("workers", "records"), [(0, 60), (2, 3)], ids=["no workers", "one block"])
def test_it_compresses_on_the_senders_thread_when_threads_would_not_pay(
    workers: int, records: int
) -> None:
    compressors = _Seen(workers=workers)
    _parts(_batch(records), records, compressors.map)
    compressors.close()
    assert compressors.threads == {threading.get_ident()} and compressors.parallel_batches == 0


def test_a_workers_exception_is_raised_on_the_senders_thread() -> None:
    def fails(item: int) -> int:
        if item == 5:
            raise ValueError("corrupt")
        return item

    compressors = Compressors(workers=2)
    try:
        with pytest.raises(ValueError, match="corrupt"):
            compressors.map(fails, range(8))
        assert compressors.map(lambda i: i * 2, range(7)) == [i * 2 for i in range(7)]
    finally:
        compressors.close()


def test_the_workers_follow_the_cores_with_no_cap() -> None:
    assert [workers_for(n) for n in (None, 1, 2, 3, 4, 5, 64)] == [0, 0, 0, 0, 3, 4, 63]


def test_the_cores_are_those_this_process_may_run_on() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))


CODECS = [CompressionType.LZ4, CompressionType.SNAPPY, CompressionType.GZIP,
          CompressionType.ZSTD]  # fmt: skip


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_every_batch_of_a_request_is_compressed_side_by_side_into_its_own_bytes(
    codec: CompressionType,
) -> None:
    """A batch of many blocks and five of one block (none has two pieces alone): their
    pieces go out together, and each batch gets what compressing it alone makes."""
    payloads = [memoryview(_batch(60))]
    payloads += [memoryview(b"batch %d; " % i * (50 + i)) for i in range(5)]
    compressors = _Seen(workers=1)
    try:
        together = compressors.compress_all(codec, None, payloads)
    finally:
        compressors.close()
    assert compressors.parallel_batches == 1 and len(compressors.threads) == 2
    assert [b"".join(parts) for parts in together] == [compress(codec, p) for p in payloads]
    assert [decompress(codec, b"".join(parts)) for parts in together] == [
        bytes(p) for p in payloads
    ]


def test_runs_are_cut_in_order_by_bytes_not_by_count() -> None:
    items = list(range(6))
    assert _runs(items, [100, 1, 1, 1, 1, 1], 2) == [[0], [1, 2, 3, 4, 5]]
    assert _runs(items, [1] * 6, 3) == [[0, 1], [2, 3], [4, 5]]
    assert _runs(items, [1] * 6, 10) == [[0], [1], [2], [3], [4], [5]]
    assert _runs([7], [0], 4) == [[7]]
