"""The SASL credentials board: how ``set_sasl_credentials`` in any app process reaches the
pool's Sender, whose next authentication (a new connection, or a re-authentication) uses
them, as librdkafka's ``rd_kafka_sasl_set_credentials`` does for its own connections.

Rules:
- A producer writes under the kernel lock on CREDENTIALS_BYTE, as a sequence lock: the
  version goes odd, the lengths and bytes are written, the version goes even (stored last).
  The Sender reads without a lock and keeps a read only if the version was the same even
  number before and after it.
- The board overrides the credentials the Sender was started with, for the pool's life: a
  Sender started again after a crash reads it too.
- The credentials are secrets: they live only here, in the pool's segment (mode 0600, its
  owner's only), never in a log line, an exception or ``shmkafka stat``.
"""

from __future__ import annotations

from shmkafka.shm.layout import CREDENTIALS_BYTE, CREDENTIALS_HEADER, CREDENTIALS_MAX, U64
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.segment import Segment

READ_TRIES = 100


class CredentialsBoard:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.at = segment.layout.credentials_at

    def version(self) -> int:
        """0 before any credentials were given; even between writes."""
        version: int = U64.unpack_from(self.segment.buf, self.at)[0]
        return version

    def post(self, username: str, password: str) -> None:
        """A producer: the credentials for the Sender's next authentication. ValueError
        (before anything is written) when they do not fit the board."""
        user, secret = username.encode(), password.encode()
        if len(user) + len(secret) > CREDENTIALS_MAX:
            raise ValueError(
                f"SASL username and password of {len(user) + len(secret)} bytes together "
                f"exceed {CREDENTIALS_MAX}"
            )
        with KernelLock.for_segment(self.segment, CREDENTIALS_BYTE):
            version = self.version()
            self.segment.store_u64(self.at, version + 1)  # odd: being written
            buf, start = self.segment.buf, self.at + CREDENTIALS_HEADER.size
            buf[start : start + len(user)] = user
            buf[start + len(user) : start + len(user) + len(secret)] = secret
            CREDENTIALS_HEADER.pack_into(buf, self.at, version + 1, len(user), len(secret))
            self.segment.store_u64(self.at, version + 2)  # published

    def read(self) -> tuple[int, str, str] | None:
        """The Sender: (version, username, password) last posted, or None if none was (or a
        write never ends: the caller keeps what it has and asks again later)."""
        buf, start = self.segment.buf, self.at + CREDENTIALS_HEADER.size
        for _ in range(READ_TRIES):
            before = self.version()
            if before == 0:
                return None
            if before % 2:
                continue
            _, user_len, secret_len = CREDENTIALS_HEADER.unpack_from(buf, self.at)
            user_len, secret_len = min(user_len, CREDENTIALS_MAX), min(secret_len, CREDENTIALS_MAX)
            data = bytes(buf[start : start + user_len + secret_len])
            if self.version() == before:
                user, secret = data[:user_len], data[user_len:]
                return before, user.decode("utf-8", "replace"), secret.decode("utf-8", "replace")
        return None
