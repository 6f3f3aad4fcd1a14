"""The OAUTHBEARER token board: how a token made by an app process's callback reaches the
Sender (a callback cannot cross processes; its result can).

Rules:
- The Sender asks (``ask``: ``asked`` + 1, at most one question open) and takes the answer
  when ``answered`` equals ``asked`` (``take``). A producer process that has a token
  callback checks the board from its completion thread; when a question is open it calls
  its callback and writes token and expiry, ``answered`` last, under the kernel lock on
  TOKEN_BYTE (so two producers never write one token over the other; the lock dies with a
  producer that dies holding it).
- The token is a secret: it lives only here, in the pool's segment (mode 0600, its owner's
  only), never in a log line or an exception.
"""

from __future__ import annotations

from collections.abc import Callable

from shmkafka.shm.layout import TOKEN_BYTE, TOKEN_HEADER, TOKEN_MAX, U64
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.segment import Segment

ASKED, ANSWERED = 0, 8  # offsets in the region


class TokenBoard:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.at = segment.layout.token_at

    def _counts(self) -> tuple[int, int]:
        buf = self.segment.buf
        return (int(U64.unpack_from(buf, self.at + ASKED)[0]),
                int(U64.unpack_from(buf, self.at + ANSWERED)[0]))  # fmt: skip

    def ask(self) -> None:
        """The Sender wants a fresh token (nothing if a question is already open)."""
        asked, answered = self._counts()
        if asked == answered:
            self.segment.store_u64(self.at + ASKED, asked + 1)

    def open_question(self) -> bool:
        asked, answered = self._counts()
        return asked > answered

    def take(self) -> tuple[str, int] | None:
        """The Sender: the answer to its last question, once there is one."""
        asked, answered = self._counts()
        if asked == 0 or asked != answered:
            return None
        _, _, expiry_ms, length = TOKEN_HEADER.unpack_from(self.segment.buf, self.at)
        start = self.at + TOKEN_HEADER.size
        return bytes(self.segment.buf[start : start + length]).decode(), int(expiry_ms)

    def answer(self, make: Callable[[], tuple[str, int]]) -> bool:
        """A producer: if a question is open, answer it with ``make()`` (token, expiry ms);
        returns whether it did."""
        if not self.open_question():
            return False
        with KernelLock.for_segment(self.segment, TOKEN_BYTE):
            asked, answered = self._counts()
            if asked == answered:
                return False  # another producer answered first
            token, expiry_ms = make()
            encoded = token.encode()
            if len(encoded) > TOKEN_MAX:
                raise ValueError(f"an OAUTHBEARER token of {len(encoded)} bytes is too long")
            buf = self.segment.buf
            start = self.at + TOKEN_HEADER.size
            buf[start : start + len(encoded)] = encoded
            TOKEN_HEADER.pack_into(buf, self.at, asked, answered, expiry_ms, len(encoded))
            self.segment.store_u64(self.at + ANSWERED, asked)  # publishes the token
        return True
