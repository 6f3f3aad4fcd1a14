from __future__ import annotations

import dataclasses
import os
import stat
import struct

import pytest

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.config import PoolConfig, validate_pool_name
from shmkafka.shm.errors import (
    LayoutMismatchError,
    PoolNotFoundError,
    SegmentOwnerError,
    SegmentSpaceError,
    ShmConfigError,
)
from shmkafka.shm.segment import Segment, list_semaphores
from tests.conftest import SMALL


def test_create_then_attach_share_memory(pool_name: str) -> None:
    first = SharedPool.open(pool_name, SMALL)
    try:
        assert first.created
        second = SharedPool.open(pool_name, SMALL)
        assert not second.created
        assert second.slot != first.slot
        first.segment.buf[first.layout.slabs_at] = 0x5A
        assert second.segment.buf[second.layout.slabs_at] == 0x5A
        second.detach()
    finally:
        first.destroy()
    assert not os.path.exists(f"/dev/shm/shmkafka.{pool_name}")
    assert list_semaphores(pool_name) == []


def test_segment_is_private_and_its_fixed_regions_reserved(pool: SharedPool) -> None:
    st = os.stat(f"/dev/shm/shmkafka.{pool.name}")
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_size == pool.layout.size
    grown_from, grown_to = pool.layout.grown_regions
    fixed = pool.layout.size - (grown_to - grown_from)
    # posix_fallocate reserved every page of the fixed regions; of the growing ones, only
    # what this pool's one slot uses
    assert fixed <= st.st_blocks * 512 <= fixed + 2 * pool.layout.slot_size


def test_attach_with_other_config_names_the_keys(pool: SharedPool) -> None:
    other = dataclasses.replace(SMALL, batch_size=2048, max_processes=4)
    with pytest.raises(LayoutMismatchError) as info:
        SharedPool.open(pool.name, other)
    assert any(
        d.startswith("batch_size: segment has 1024, asked 2048") for d in info.value.differences
    )
    assert any(d.startswith("max_processes") for d in info.value.differences)
    assert len(info.value.differences) == 2


def test_attach_with_other_layout_version(pool: SharedPool) -> None:
    struct.pack_into("<I", pool.segment.buf, 8, 999)
    with pytest.raises(LayoutMismatchError, match="layout_version: segment has 999"):
        Segment.attach(pool.name)
    struct.pack_into("<I", pool.segment.buf, 8, 1)


def test_attach_without_config_reads_the_stored_one(pool: SharedPool) -> None:
    other = SharedPool.open(pool.name)
    try:
        assert other.config == SMALL
    finally:
        other.detach()


def test_missing_pool(pool_name: str) -> None:
    with pytest.raises(PoolNotFoundError):
        SharedPool.open(pool_name)


def test_segment_of_another_user_is_refused(pool: SharedPool) -> None:
    path = f"/dev/shm/shmkafka.{pool.name}"
    original = os.stat(path).st_uid
    os.chown(path, original + 4242, -1)
    try:
        with pytest.raises(SegmentOwnerError, match="belongs to uid"):
            Segment.attach(pool.name)
    finally:
        os.chown(path, original, -1)


@pytest.mark.catalogue(31)
def test_full_dev_shm_is_a_clear_error_and_leaves_nothing(pool_name: str) -> None:
    total = os.statvfs("/dev/shm")
    too_big = min(64 * 1024**3, total.f_blocks * total.f_frsize * 2)
    config = dataclasses.replace(SMALL, buffer_memory=too_big, batch_size=64 * 1024 * 1024)
    with pytest.raises(SegmentSpaceError, match=r"needs .* to create it"):
        SharedPool.open(pool_name, config)
    assert not os.path.exists(f"/dev/shm/shmkafka.{pool_name}")


@pytest.mark.parametrize("name", ["", "a/b", "x" * 65, "dot.name", "sp ace", "../etc"])
def test_invalid_pool_names(name: str) -> None:
    with pytest.raises(ShmConfigError, match="invalid pool name"):
        validate_pool_name(name)


@pytest.mark.parametrize(
    ("key", "value"),
    [("batch_size", 10), ("buffer_memory", 100), ("max_processes", 70000), ("lock_stripes", 0)],
)
def test_invalid_config_values(key: str, value: int) -> None:
    with pytest.raises(ShmConfigError, match=key):
        PoolConfig(**{key: value})


def test_buffer_memory_must_hold_a_slab() -> None:
    with pytest.raises(ShmConfigError, match="at least one slab"):
        PoolConfig(batch_size=8192, buffer_memory=4096)
    # a batch may be larger than the pool: it grows in slabs as far as memory allows
    assert PoolConfig(batch_size=1_000_000, buffer_memory=65536).max_run == 61
