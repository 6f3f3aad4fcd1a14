"""The lab's network: one Ethernet switch in user space, a TAP device per port, and netem's
impairments on each port (this kernel has no ``sch_netem``, so the switch makes them).

Every frame between two namespaces of the lab crosses this process once. A port's
impairment applies to the frames it sends and to those it receives, as netem on both ends
of a host's link would: delay with jitter, loss, duplication, reordering and corruption.

Rules:
- Run as root: ``python -m tests.hosts.netem``. Commands come one JSON object per line on
  stdin, and each gets one JSON line on stdout, after it took effect:
  ``{"op": "add", "name": "shk1a2bh0"}`` makes a TAP port (the caller moves it into its
  namespace; this process keeps its file, and the device goes with it);
  ``{"op": "set", "name": ..., "delay_ms": 40, "jitter_ms": 20, "loss": 0.1,
  "duplicate": 0.05, "reorder": 0.25, "corrupt": 0.02}`` (any subset; missing ones are 0);
  ``{"op": "counters"}`` gives every port's frames in, out, lost, duplicated, reordered and
  corrupted. End of stdin ends the switch and removes its ports.
- A switch learns where each source MAC lives and floods the rest, as a bridge does.
- Reordering is netem's: with delay set, a frame picked with ``reorder`` goes at once,
  ahead of the delayed ones. Jitter reorders too, as netem's does without a rate.
- Corruption flips one bit past an IPv4 frame's IP header, so the receiver's TCP checksum
  finds it and drops the segment: what a corrupting link does to a host.
- A frame that a full TAP queue refuses is dropped, as a full link drops it.
"""

from __future__ import annotations

import fcntl
import heapq
import json
import os
import random
import select
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IPV4 = b"\x08\x00"
IP_PAYLOAD_AT = 14 + 20  # Ethernet header, then an IPv4 header without options
KINDS = ("delay_ms", "jitter_ms", "loss", "duplicate", "reorder", "corrupt")


@dataclass
class Port:
    name: str
    fd: int
    impairment: dict[str, float] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)


def open_tap(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


class Switch:
    def __init__(self, seed: int | None = None) -> None:
        self.ports: dict[int, Port] = {}  # by fd
        self.by_name: dict[str, Port] = {}
        self.where: dict[bytes, Port] = {}  # MAC → port
        self.queue: list[tuple[float, int, Port, bytes]] = []  # (due, order, to, frame)
        self.order = 0
        self.rng = random.Random(seed)

    def attach(self, port: Port) -> None:
        """A port on any file whose reads and writes are whole frames (a TAP device)."""
        self.ports[port.fd] = port
        self.by_name[port.name] = port

    def detach(self, port: Port) -> None:
        self.ports.pop(port.fd, None)
        self.by_name.pop(port.name, None)
        self.where = {mac: p for mac, p in self.where.items() if p is not port}
        os.close(port.fd)

    def command(self, line: str) -> dict[str, object]:
        request = json.loads(line)
        op = request.pop("op")
        if op == "add":
            self.attach(Port(request["name"], open_tap(request["name"])))
            return {"ok": True}
        if op == "set":
            port = self.by_name[request.pop("name")]
            unknown = set(request) - set(KINDS)
            if unknown:
                return {"ok": False, "error": f"unknown impairments {sorted(unknown)}"}
            port.impairment = {k: float(v) for k, v in request.items() if v}
            return {"ok": True}
        if op == "counters":
            return {"ok": True, "ports": {p.name: dict(p.counters) for p in self.ports.values()}}
        return {"ok": False, "error": f"unknown op {op!r}"}

    # ------------------------------------------------------------------ frames

    def receive(self, port: Port) -> None:
        for _ in range(64):  # (a burst at a time, then the others' turn)
            try:
                frame = os.read(port.fd, 65536)
            except BlockingIOError:
                return
            except OSError:  # its device is gone (its namespace was deleted): unplugged
                self.detach(port)
                return
            port.counters["in"] += 1
            self.where[frame[6:12]] = port
            to = self.where.get(frame[0:6])
            if to is not None and frame[0] & 1 == 0:
                if to is not port:
                    self.forward(port, to, frame)
            else:  # broadcast, multicast or not learnt yet: flood
                for other in self.ports.values():
                    if other is not port:
                        self.forward(port, other, frame)

    def forward(self, source: Port, to: Port, frame: bytes) -> None:
        a, b = source.impairment, to.impairment
        if not a and not b:
            self.write(to, frame)
            return
        rng = self.rng
        if rng.random() < a.get("loss", 0) or rng.random() < b.get("loss", 0):
            to.counters["lost"] += 1
            return
        copies = 1
        if rng.random() < a.get("duplicate", 0) or rng.random() < b.get("duplicate", 0):
            copies = 2
            to.counters["duplicated"] += 1
        if (
            frame[12:14] == IPV4
            and len(frame) > IP_PAYLOAD_AT + 1
            and (rng.random() < a.get("corrupt", 0) or rng.random() < b.get("corrupt", 0))
        ):
            at = rng.randrange(IP_PAYLOAD_AT, len(frame))
            frame = frame[:at] + bytes([frame[at] ^ (1 << rng.randrange(8))]) + frame[at + 1 :]
            to.counters["corrupted"] += 1
        delay_ms = a.get("delay_ms", 0) + b.get("delay_ms", 0)
        jitter_ms = a.get("jitter_ms", 0) + b.get("jitter_ms", 0)
        reorder = max(a.get("reorder", 0), b.get("reorder", 0))
        if delay_ms and rng.random() < reorder:
            delay_ms = jitter_ms = 0
            to.counters["reordered"] += 1
        if jitter_ms:
            delay_ms = max(0.0, delay_ms + rng.uniform(-jitter_ms, jitter_ms))
        for _ in range(copies):
            if delay_ms:
                self.order += 1
                due = time.monotonic() + delay_ms / 1000
                heapq.heappush(self.queue, (due, self.order, to, frame))
            else:
                self.write(to, frame)

    def write(self, to: Port, frame: bytes) -> None:
        try:
            os.write(to.fd, frame)
            to.counters["out"] += 1
        except (BlockingIOError, OSError):
            to.counters["refused"] += 1

    def release_due(self) -> float | None:
        """Write the frames whose delay is over; the seconds until the next one."""
        now = time.monotonic()
        while self.queue and self.queue[0][0] <= now:
            _, _, to, frame = heapq.heappop(self.queue)
            self.write(to, frame)
        return max(0.0, self.queue[0][0] - now) if self.queue else None

    # ------------------------------------------------------------------ the loop

    def serve(self, control: int) -> None:
        pending = b""
        while True:
            timeout = self.release_due()
            readable, _, _ = select.select([control, *self.ports], [], [], timeout)
            for fd in readable:
                if fd != control:
                    self.receive(self.ports[fd])
                    continue
                data = os.read(control, 65536)
                if not data:
                    return
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    try:
                        answer = self.command(line.decode())
                    except Exception as exc:  # noqa: BLE001 - the caller is told, the lab goes on
                        answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    sys.stdout.write(json.dumps(answer) + "\n")
                    sys.stdout.flush()


def main() -> int:
    switch = Switch()
    try:
        switch.serve(sys.stdin.fileno())
    finally:
        for fd in switch.ports:
            os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
