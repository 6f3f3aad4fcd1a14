"""The lab's switch (netem.py) without TAP devices or root: ports on datagram socket pairs,
frames in at one end, out at another, with netem's impairments applied as set."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.hosts.netem import IP_PAYLOAD_AT, IPV4, Port, Switch

BROADCAST = b"\xff" * 6
A_MAC, B_MAC, C_MAC = (bytes([2, 0, 0, 0, 0, n]) for n in (1, 2, 3))


def _frame(dst: bytes, src: bytes, payload: bytes = b"x" * 60) -> bytes:
    return dst + src + IPV4 + payload


class Lab:
    def __init__(self) -> None:
        self.switch = Switch(seed=1)
        self.outside: dict[str, socket.socket] = {}
        self.inside: list[socket.socket] = []
        for name in ("a", "b", "c"):
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            theirs.setblocking(False)
            mine.setblocking(False)
            self.switch.attach(Port(name, theirs.fileno()))
            self.outside[name], self.inside = mine, [*self.inside, theirs]

    def send(self, name: str, frame: bytes) -> None:
        self.outside[name].send(frame)
        self.switch.receive(self.switch.by_name[name])

    def received(self, name: str) -> list[bytes]:
        out = []
        while True:
            try:
                out.append(self.outside[name].recv(65536))
            except BlockingIOError:
                return out

    def close(self) -> None:
        for sock in [*self.outside.values(), *self.inside]:
            sock.close()


@pytest.fixture
def lab() -> Iterator[Lab]:
    made = Lab()
    yield made
    made.close()


def test_frames_are_flooded_until_their_destination_is_learnt(lab: Lab) -> None:
    hello = _frame(BROADCAST, A_MAC)
    lab.send("a", hello)
    assert lab.received("b") == [hello] and lab.received("c") == [hello]
    assert lab.received("a") == []  # (never back out of the port it came in by)
    reply = _frame(A_MAC, B_MAC)
    lab.send("b", reply)
    assert lab.received("a") == [reply] and lab.received("c") == []


def test_loss_duplication_and_corruption_as_set(lab: Lab) -> None:
    lab.send("a", _frame(BROADCAST, A_MAC))
    lab.send("b", _frame(BROADCAST, B_MAC))
    lab.received("a"), lab.received("b"), lab.received("c")
    frame = _frame(B_MAC, A_MAC)
    assert lab.switch.command(json.dumps({"op": "set", "name": "b", "loss": 1.0}))["ok"]
    lab.send("a", frame)
    assert lab.received("b") == [] and lab.switch.by_name["b"].counters["lost"] == 1
    lab.switch.command(json.dumps({"op": "set", "name": "a", "duplicate": 1.0}))
    lab.switch.command(json.dumps({"op": "set", "name": "b"}))  # (cleared)
    lab.send("a", frame)
    assert lab.received("b") == [frame, frame]
    lab.switch.command(json.dumps({"op": "set", "name": "a", "corrupt": 1.0}))
    lab.send("a", frame)
    (bad,) = lab.received("b")
    flipped = [i for i, (x, y) in enumerate(zip(frame, bad, strict=True)) if x != y]
    assert len(flipped) == 1 and flipped[0] >= IP_PAYLOAD_AT
    assert bin(frame[flipped[0]] ^ bad[flipped[0]]).count("1") == 1
    refused = lab.switch.command(json.dumps({"op": "set", "name": "a", "jitter": 1}))
    assert not refused["ok"] and "jitter" in str(refused["error"])


def test_delay_holds_frames_and_reordering_sends_some_ahead(lab: Lab) -> None:
    lab.send("a", _frame(BROADCAST, A_MAC))
    lab.send("b", _frame(BROADCAST, B_MAC))
    lab.received("a"), lab.received("b"), lab.received("c")
    lab.switch.command(json.dumps({"op": "set", "name": "a", "delay_ms": 50}))
    first, second = _frame(B_MAC, A_MAC, b"1" * 60), _frame(B_MAC, A_MAC, b"2" * 60)
    sent_at = time.monotonic()
    lab.send("a", first)
    assert lab.received("b") == [] and lab.switch.release_due() is not None
    deadline = sent_at + 5
    while not (out := lab.received("b")) and time.monotonic() < deadline:
        time.sleep((lab.switch.release_due() or 0) + 0.001)
    assert out == [first] and time.monotonic() - sent_at >= 0.05
    lab.switch.command(json.dumps({"op": "set", "name": "a", "delay_ms": 50, "reorder": 1.0}))
    lab.switch.command(json.dumps({"op": "set", "name": "b", "delay_ms": 50}))
    lab.switch.command(json.dumps({"op": "set", "name": "a", "delay_ms": 50}))
    lab.send("a", first)  # delayed 100 ms (both ends)
    lab.switch.command(json.dumps({"op": "set", "name": "a", "delay_ms": 50, "reorder": 1.0}))
    lab.send("a", second)  # picked for reordering: at once, ahead of the first
    assert lab.received("b") == [second]
    assert lab.switch.by_name["b"].counters["reordered"] == 1
    assert len(lab.switch.queue) == 1  # (only the first is still held)
