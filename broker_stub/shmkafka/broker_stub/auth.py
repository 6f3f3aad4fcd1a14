"""The SASL server side of one connection, sans-IO: which requests a connection may send
before and after it authenticated, and the SaslHandshake/SaslAuthenticate answers, after
Kafka's SaslServerAuthenticator (the mechanisms themselves are ``shmkafka.protocol.sasl``'s).

Rules:
- Until a connection has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate
  are served; ``admits`` says False for anything else and the server closes the connection,
  as Kafka does. Once ``closing`` is set (a failed or out-of-order exchange), the server
  writes the answer, waits ``failed_authentication_delay_ms`` as Kafka does, then closes.
- A failure answers SASL_AUTHENTICATION_FAILED with Kafka's error_message: PLAIN's own
  reasons ("Authentication failed: Invalid username or password"), SCRAM's and malformed
  messages' generic one ("Authentication failed during authentication due to invalid
  credentials with SASL mechanism M"), OAUTHBEARER's RFC 7628 JSON status (sent first in
  auth_bytes; the client answers \\x01). No message carries a password or a token.
- SCRAM users are stored as salted credentials only (``ScramCredential``); PLAIN keeps the
  password it must compare, as Kafka's JAAS configuration does.
- KIP-368: a session lives ``session_lifetime_ms`` (capped by an OAUTHBEARER token's expiry,
  as Kafka caps it); after that, any request but the SaslHandshake that starts a
  re-authentication closes the connection. Re-authentication keeps the mechanism and the
  principal.
- SaslHandshake v0 is answered, but the unframed tokens that would follow it are not
  served (``unframed``: the server closes): kafka-python and librdkafka use v1.
- Time comes in as arguments: ``now_ms`` (monotonic, for the session's lifetime) and
  ``wall_ms`` (for a token's ``exp``).
"""

from __future__ import annotations

import hmac
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import (
    ApiVersionsRequest,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from shmkafka.protocol.sasl import (
    MECHANISMS,
    SCRAM_HASHES,
    SCRAM_MIN_ITERATIONS,
    SaslError,
    ScramCredential,
    ScramServer,
    check_unsecured_jwt,
    oauthbearer_token,
    plain_check,
)

HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = "handshake", "authenticate", "complete", "failed"
_BEFORE_AUTH = (ApiVersionsRequest.API_KEY, SaslHandshakeRequest.API_KEY,
                SaslAuthenticateRequest.API_KEY)  # fmt: skip
INVALID_TOKEN = json.dumps({"status": "invalid_token"}, separators=(",", ":"))


@dataclass(frozen=True)
class SaslConfig:
    """A listener's SASL settings: the enabled mechanisms (in the order a SaslHandshake
    answer lists them), PLAIN's passwords and SCRAM's credentials by (mechanism, user)."""

    mechanisms: tuple[str, ...]
    plain: Mapping[str, str] = field(default_factory=dict)
    scram: Mapping[tuple[str, str], ScramCredential] = field(default_factory=dict)
    session_lifetime_ms: int = 0  # 0: sessions never expire (unless a token does)
    # Kafka's connection.failed.authentication.delay.ms: the failure answer is read by the
    # client before the connection closes (kafka-python drops data that arrives with EOF).
    failed_authentication_delay_ms: int = 100

    def __post_init__(self) -> None:
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        if unknown or not self.mechanisms:
            raise ValueError(
                f"SASL mechanisms {list(self.mechanisms)}: each must be one of {list(MECHANISMS)}"
            )
        if self.session_lifetime_ms < 0 or self.failed_authentication_delay_ms < 0:
            raise ValueError("session_lifetime_ms and failed_authentication_delay_ms must be >= 0")

    @classmethod
    def make(
        cls,
        mechanisms: Iterable[str],
        users: Mapping[str, str] | None = None,
        session_lifetime_ms: int = 0,
        iterations: int = SCRAM_MIN_ITERATIONS,
    ) -> SaslConfig:
        """From user → password: SCRAM mechanisms keep only salted credentials."""
        enabled = tuple(dict.fromkeys(m.strip().upper() for m in mechanisms if m.strip()))
        users = users or {}
        plain = dict(users) if "PLAIN" in enabled else {}
        scram = {
            (m, user): ScramCredential.make(m, password, iterations=iterations)
            for m in enabled
            if m in SCRAM_HASHES
            for user, password in users.items()
        }
        return cls(enabled, plain, scram, session_lifetime_ms)


class _Refused(Exception):
    """The exchange failed; ``message`` is the error_message the client gets (None: Kafka's
    generic one, which says nothing of why)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message)
        self.message = message


class _Exchange(Protocol):
    done: bool
    user: str | None
    expiry_wall_ms: int | None  # a credential's own expiry (an OAUTHBEARER token's exp)

    def step(self, client: bytes, wall_ms: int) -> bytes: ...


class _Plain:
    def __init__(self, passwords: Mapping[str, str]) -> None:
        self._passwords = passwords
        self.done = False
        self.user: str | None = None
        self.expiry_wall_ms: int | None = None

    def _verify(self, user: str, password: str) -> bool:
        stored = self._passwords.get(user)
        return stored is not None and hmac.compare_digest(stored.encode(), password.encode())

    def step(self, client: bytes, wall_ms: int) -> bytes:
        parts = client.split(b"\0")
        if len(parts) != 3:  # Kafka: a SaslException, answered with the generic message
            raise _Refused()
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user:
            raise _Refused("Authentication failed: username not specified")
        if not password:
            raise _Refused("Authentication failed: password not specified")
        try:
            plain_check(client, self._verify)
        except SaslError:
            raise _Refused("Authentication failed: Invalid username or password") from None
        if authzid and authzid != user:
            raise _Refused(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        self.user, self.done = user, True
        return b""


class _Scram:
    def __init__(self, mechanism: str, credentials: Mapping[tuple[str, str], ScramCredential]):
        self._server = ScramServer(mechanism, lambda user: credentials.get((mechanism, user)))
        self._messages = 0
        self.done = False
        self.user: str | None = None
        self.expiry_wall_ms: int | None = None

    def step(self, client: bytes, wall_ms: int) -> bytes:
        try:
            answer = self._server.respond(client)
        except (SaslError, ValueError):  # Kafka never says which check failed
            raise _Refused() from None
        self._messages += 1
        if self._messages == 2:
            self.user, self.done = self._server.user, True
        return answer


class _OAuthBearer:
    """Kafka's unsecured-JWT validator: alg none, ``sub``, ``exp`` in the future."""

    def __init__(self) -> None:
        self._error: str | None = None
        self.done = False
        self.user: str | None = None
        self.expiry_wall_ms: int | None = None

    def step(self, client: bytes, wall_ms: int) -> bytes:
        if client == b"\x01" and self._error is not None:
            raise _Refused(self._error)  # the client acknowledged our error status
        self._error = None
        try:
            token = oauthbearer_token(client)
        except SaslError:
            raise _Refused() from None
        try:
            self.user, self.expiry_wall_ms = check_unsecured_jwt(token, wall_ms / 1000)
        except SaslError:
            self._error = INVALID_TOKEN
            return INVALID_TOKEN.encode()
        self.done = True
        return b""


def _exchange(config: SaslConfig, mechanism: str) -> _Exchange:
    if mechanism == "PLAIN":
        return _Plain(config.plain)
    if mechanism in SCRAM_HASHES:
        return _Scram(mechanism, config.scram)
    return _OAuthBearer()


class SaslSession:
    """One connection's authentication state. Without a config (a listener without SASL)
    every request is served and SASL requests get ILLEGAL_SASL_STATE, as Kafka answers."""

    def __init__(self, config: SaslConfig | None, events: Counter[str] | None = None) -> None:
        self.config = config
        self.events: Counter[str] = Counter() if events is None else events
        self.state = HANDSHAKE if config is not None else COMPLETE
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.expires_at_ms: int | None = None  # monotonic; None: never
        self.closing = False  # the answer is the connection's last
        self.unframed = False  # after SaslHandshake v0: raw tokens follow (not served)
        self._supports_reauth = False  # the client sent a SaslAuthenticate v1+
        self._reauthenticating = False
        self._bad_mechanism: str | None = None
        self._requested = ""  # the mechanism of the exchange under way
        self._exchange: _Exchange | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == COMPLETE

    def admits(self, api_key: int, now_ms: int) -> bool:
        """May a request of ``api_key`` be served now? False: close the connection."""
        if self.closing or self.unframed or self.state == FAILED:
            return False
        if self.state == HANDSHAKE:
            return api_key in _BEFORE_AUTH
        if self.state == AUTHENTICATE:
            return api_key in (SaslHandshakeRequest.API_KEY, SaslAuthenticateRequest.API_KEY)
        if self.expires_at_ms is not None and now_ms >= self.expires_at_ms:
            if api_key == SaslHandshakeRequest.API_KEY and self._supports_reauth:
                return True  # KIP-368: a re-authentication may start after expiry
            self.events["expired"] += 1
            return False
        return True

    def handle(
        self,
        request: SaslHandshakeRequest | SaslAuthenticateRequest,
        version: int,
        now_ms: int,
        wall_ms: int,
    ) -> SaslHandshakeResponse | SaslAuthenticateResponse:
        if isinstance(request, SaslHandshakeRequest):
            return self._handshake(request, version)
        return self._authenticate(request, version, now_ms, wall_ms)

    # ------------------------------------------------------------------ SaslHandshake

    def _handshake(self, request: SaslHandshakeRequest, version: int) -> SaslHandshakeResponse:
        config = self.config
        if config is None or (self.state == COMPLETE and not self._supports_reauth):
            return SaslHandshakeResponse(ErrorCode.ILLEGAL_SASL_STATE, ())  # Kafka's KafkaApis
        if self.state == AUTHENTICATE:  # a second handshake in the middle of an exchange
            return self._fail_handshake(ErrorCode.ILLEGAL_SASL_STATE, ())
        if request.mechanism not in config.mechanisms:
            return self._fail_handshake(ErrorCode.UNSUPPORTED_SASL_MECHANISM, config.mechanisms)
        if self.state == COMPLETE:  # KIP-368: a re-authentication starts
            self._reauthenticating = True
            if request.mechanism != self.mechanism:
                self._bad_mechanism = (
                    f"SASL mechanism '{request.mechanism}' requested by client is not "
                    f"supported for re-authentication of mechanism '{self.mechanism}'"
                )
        self.state, self._requested = AUTHENTICATE, request.mechanism
        self._exchange = _exchange(config, request.mechanism)
        self.unframed = version == 0
        return SaslHandshakeResponse(ErrorCode.NONE, config.mechanisms)

    def _fail_handshake(self, code: int, mechanisms: tuple[str, ...]) -> SaslHandshakeResponse:
        self.state, self.closing = FAILED, True
        self.events["failed"] += 1
        return SaslHandshakeResponse(code, mechanisms)

    # ------------------------------------------------------------------ SaslAuthenticate

    def _authenticate(
        self, request: SaslAuthenticateRequest, version: int, now_ms: int, wall_ms: int
    ) -> SaslAuthenticateResponse:
        if self.state == COMPLETE:  # Kafka's KafkaApis; the connection stays open
            return SaslAuthenticateResponse(
                ErrorCode.ILLEGAL_SASL_STATE,
                "SaslAuthenticate request received after successful authentication",
            )
        if self.state != AUTHENTICATE or self._exchange is None:
            self.state, self.closing = FAILED, True
            self.events["failed"] += 1
            return SaslAuthenticateResponse(
                ErrorCode.ILLEGAL_SASL_STATE,
                "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake.",
            )
        self._supports_reauth = self._supports_reauth or version > 0
        exchange = self._exchange
        try:
            if self._bad_mechanism is not None:
                raise _Refused(self._bad_mechanism)
            answer = exchange.step(bytes(request.auth_bytes), wall_ms)
            if exchange.done and self._reauthenticating and exchange.user != self.principal:
                raise _Refused(
                    "Cannot change principals during re-authentication from "
                    f"User.{self.principal}: User.{exchange.user}"
                )
        except _Refused as refused:
            return self._refuse(refused.message)
        if not exchange.done:
            return SaslAuthenticateResponse(ErrorCode.NONE, None, answer)
        lifetime = self._complete(exchange, now_ms, wall_ms)
        return SaslAuthenticateResponse(ErrorCode.NONE, None, answer, lifetime)

    def _complete(self, exchange: _Exchange, now_ms: int, wall_ms: int) -> int:
        """The exchange succeeded: the session starts; returns its lifetime in ms (0: none)."""
        assert self.config is not None
        self.events["reauthenticated" if self._reauthenticating else "authenticated"] += 1
        self.principal = exchange.user
        self.mechanism = self._requested
        self.state, self._exchange, self._reauthenticating = COMPLETE, None, False
        lifetime = self.config.session_lifetime_ms
        if exchange.expiry_wall_ms is not None:  # Kafka: min(max reauth, credential's expiry)
            left = max(0, exchange.expiry_wall_ms - wall_ms)
            lifetime = min(lifetime, left) if lifetime else left
            self.expires_at_ms = now_ms + lifetime
        else:
            self.expires_at_ms = now_ms + lifetime if lifetime else None
        return lifetime

    def _refuse(self, message: str | None) -> SaslAuthenticateResponse:
        if message is None:
            during = "re-authentication" if self._reauthenticating else "authentication"
            message = (
                f"Authentication failed during {during} due to invalid credentials with "
                f"SASL mechanism {self._requested}"
            )
        self.state, self.closing = FAILED, True
        self.events["failed"] += 1
        return SaslAuthenticateResponse(ErrorCode.SASL_AUTHENTICATION_FAILED, message)
