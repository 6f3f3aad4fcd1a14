"""The soak harness's own helpers."""

from __future__ import annotations

import socket
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
