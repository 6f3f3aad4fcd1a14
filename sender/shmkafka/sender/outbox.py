"""The bytes a connection has yet to write, kept as the pieces they were framed in.

A produce request's record batches are large and already in memory (compressed bytes, or
the shared segment itself for uncompressed batches): copying them into one buffer, and
moving what is left after every partial write, cost more than encoding the request. The
outbox instead writes its pieces with one ``sendmsg`` (scatter-gather) per call and only
advances an offset into the first piece.

Rules:
- A piece is written whole and in order; it must not change until it is written (a batch
  in shared memory is IN_FLIGHT, so nothing appends to it, until its response arrives,
  which is after its bytes were written).
- TLS sockets cannot ``sendmsg``: they get one piece per write.
"""

from __future__ import annotations

import socket
import ssl
from collections import deque
from itertools import islice

from shmkafka.protocol.primitives import Buffer

IOV_MAX = 512  # pieces per sendmsg (Linux allows 1024)


class Outbox:
    def __init__(self) -> None:
        self._pieces: deque[memoryview] = deque()
        self._size = 0

    def __bool__(self) -> bool:
        return self._size > 0

    def __len__(self) -> int:
        return self._size

    def append(self, piece: Buffer) -> None:
        if len(piece):
            view = memoryview(piece).cast("B")
            self._pieces.append(view)
            self._size += len(view)

    def extend(self, pieces: list[Buffer]) -> None:
        for piece in pieces:
            self.append(piece)

    def clear(self) -> None:
        for view in self._pieces:
            view.release()
        self._pieces.clear()
        self._size = 0

    def write_to(self, sock: socket.socket) -> None:
        """Write until everything is written or the socket would block (BlockingIOError,
        or ssl.SSLWant*Error, as the socket raises them)."""
        while self._pieces:
            if isinstance(sock, ssl.SSLSocket):
                sent = sock.send(self._pieces[0])
            else:
                sent = sock.sendmsg(list(islice(self._pieces, IOV_MAX)))
            self._consume(sent)

    def _consume(self, sent: int) -> None:
        self._size -= sent
        while sent:
            first = self._pieces[0]
            if sent < len(first):
                self._pieces[0] = first[sent:]
                return
            sent -= len(first)
            self._pieces.popleft().release()
