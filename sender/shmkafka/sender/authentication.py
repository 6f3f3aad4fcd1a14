"""SASL on one broker connection, after ApiVersions and before any other request: the
requests to send and what their responses mean (KIP-43's SaslHandshake v1 then
SaslAuthenticate, KIP-152), and when to authenticate again (KIP-368).

Rules:
- ``next_request`` gives the next request or None while an OAUTHBEARER token is not there
  yet (the token source is asked again on the next call); ``on_response`` raises SaslError
  on any refusal, with the broker's words and never a secret.
- A session the broker gives a lifetime is authenticated again at 85–95% of it (the Java
  client's window), so a connection never outlives its credentials.
- The mechanisms' bytes are protocol/sasl.py's; this module only sequences them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from shmkafka.protocol.sasl import (
    OAuthBearerClient,
    PlainClient,
    SaslClient,
    SaslError,
    ScramClient,
)
from shmkafka.protocol.schema import Message

# (token, its expiry in wall-clock ms) or None while no token is there yet
TokenSource = Callable[[], tuple[str, int] | None]
# (username, password) given since the Sender started (set_sasl_credentials), or None
CredentialsSource = Callable[[], tuple[str, str] | None]


@dataclass(frozen=True)
class SaslSettings:
    mechanism: str
    username: str | None = None
    password: str | None = None
    token_source: TokenSource | None = None
    credentials_source: CredentialsSource | None = None

    def credentials(self) -> tuple[str, str]:
        """The username and password for an authentication starting now: the last given
        by ``set_sasl_credentials``, else the configured ones."""
        given = self.credentials_source() if self.credentials_source is not None else None
        return given if given is not None else (self.username or "", self.password or "")

    def __repr__(self) -> str:  # (never the password in a log line)
        return f"SaslSettings(mechanism={self.mechanism!r}, username={self.username!r})"


class Authenticator:
    """One SASL exchange: handshake, then the mechanism's messages."""

    def __init__(self, settings: SaslSettings) -> None:
        self.settings = settings
        self.client: SaslClient | None = None
        self.pending: bytes | None = None  # what to send next in a SaslAuthenticate
        self.handshaken = False
        self.done = False
        self.session_lifetime_ms = 0

    def next_request(self) -> Message | None:
        if not self.handshaken:
            return SaslHandshakeRequest(mechanism=self.settings.mechanism)
        if self.client is None:
            self.client = self._client()
            if self.client is None:
                return None  # no token yet
            self.pending = self.client.first()
        if self.pending is None:
            return None
        request, self.pending = SaslAuthenticateRequest(auth_bytes=self.pending), None
        return request

    def _client(self) -> SaslClient | None:
        s = self.settings
        if s.mechanism == "PLAIN":
            return PlainClient(*s.credentials())
        if s.mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            return ScramClient(s.mechanism, *s.credentials())
        assert s.token_source is not None, "OAUTHBEARER needs a token source"
        token = s.token_source()
        return None if token is None else OAuthBearerClient(token[0])

    def on_response(self, response: Message) -> None:
        if isinstance(response, SaslHandshakeResponse):
            self._on_handshake(response)
            return
        assert isinstance(response, SaslAuthenticateResponse) and self.client is not None
        if response.error_code != ErrorCode.NONE:
            said = response.error_message or ErrorCode(response.error_code).name
            status = getattr(self.client, "refused_status", None)
            raise SaslError(said if status is None or status in said else f"{said} ({status})")
        following = self.client.respond(response.auth_bytes)
        if following is not None:
            self.pending = following
            return
        self.done = self.client.done
        self.session_lifetime_ms = response.session_lifetime_ms

    def _on_handshake(self, response: SaslHandshakeResponse) -> None:
        if response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            raise SaslError(
                f"Unsupported SASL mechanism: broker's supported mechanisms: "
                f"{','.join(response.mechanisms)}"
            )
        if response.error_code != ErrorCode.NONE:
            raise SaslError(f"SaslHandshake failed: {ErrorCode(response.error_code).name}")
        self.handshaken = True

    def reauthenticate_at(self, now_ms: int) -> int:
        """When to authenticate this session again (0: never, the broker gave no lifetime)."""
        if self.session_lifetime_ms <= 0:
            return 0
        return now_ms + int(self.session_lifetime_ms * random.uniform(0.85, 0.95))
