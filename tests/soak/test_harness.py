"""The soak harness's own helpers."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.soak import harness


def test_free_ports_closes_every_socket_of_a_range_it_gives_up() -> None:
    made: list[socket.socket] = []
    real = socket.create_server
    taken = {"calls": 0}

    def create_server(address: tuple[str, int], **kwargs: Any) -> socket.socket:
        taken["calls"] += 1
        if taken["calls"] == 3:  # the first range's third port is taken
            raise OSError("address in use")
        s = real(("127.0.0.1", 0), **kwargs)
        made.append(s)
        return s

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness.socket, "create_server", create_server)
        harness.free_ports(4)
    assert len(made) == 2 + 4  # two of the first range, all four of the second
    assert [s.fileno() for s in made] == [-1] * len(made)  # every one closed


def test_the_final_mark_carries_the_partition_count_and_only_its_owner_reads_it(
    tmp_path: Path,
) -> None:
    harness.write_final(str(tmp_path), 6)
    final = tmp_path / "final"
    assert json.loads(final.read_text()) == {"partitions": 6}
    assert final.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]  # (no part left behind)
