"""A loopback TCP proxy for network faults (test tooling): it forwards client ↔ broker and,
on command, delays, black-holes, resets (RST), truncates or throttles (slow reads) the
traffic. Threads, one pair
per connection; ``fault`` changes what happens to data from then on."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass


@dataclass
class Fault:
    kind: str = "pass"  # pass | delay | blackhole | reset | truncate | slow
    delay_s: float = 0.0  # delay: per chunk; slow: per SLOW_PIECE bytes, both directions


SLOW_PIECE = 4096


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.fault = Fault()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def set(self, kind: str, delay_s: float = 0.0) -> None:
        self.fault = Fault(kind, delay_s)

    def close(self) -> None:
        self._stop = True
        self.listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            self._serve(client, upstream)

    def _serve(self, client: socket.socket, upstream: socket.socket) -> None:
        """Forward one connection both ways (a thread each)."""
        threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, responses: bool) -> None:
        try:
            while data := source.recv(65536):
                fault = self.fault
                if fault.kind == "delay":
                    time.sleep(fault.delay_s)
                elif fault.kind == "blackhole":
                    continue  # swallowed: the other side waits for its timeout
                elif fault.kind == "reset" and responses:
                    _reset(sink)  # the request went through, the response never arrives
                    _reset(source)
                    return
                elif fault.kind == "slow":  # a peer that reads a little at a time
                    for at in range(0, len(data), SLOW_PIECE):
                        sink.sendall(data[at : at + SLOW_PIECE])
                        time.sleep(fault.delay_s)
                    continue
                elif fault.kind == "truncate" and responses:
                    sink.sendall(data[: max(1, len(data) // 2)])
                    sink.close()
                    source.close()
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.close()


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
