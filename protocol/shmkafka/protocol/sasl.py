"""SASL mechanisms, sans-IO, for both ends: the bytes a client sends and checks, the bytes a
server answers. PLAIN (RFC 4616), SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677,
Kafka's KIP-84) and OAUTHBEARER (RFC 7628, Kafka's KIP-255, with the unsecured JWTs of
librdkafka's and the Java client's test mode).

Rules:
- Each exchange is a small state machine: ``respond(server_bytes) -> client_bytes`` on the
  client, ``respond(client_bytes) -> server_bytes`` on the server; a failure raises
  ``SaslError`` whose message never contains a password, a salted password or a token.
- Nothing here reads a clock or a socket: the Sender and broker_stub wrap the bytes in
  SaslAuthenticate requests (messages/sasl.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from shmkafka.protocol.errors import KafkaError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MIN_ITERATIONS = 4096  # Kafka's minimum


class SaslError(KafkaError):
    """An authentication exchange failed; the message says why, never with a secret."""


# ----------------------------------------------------------------------------- PLAIN


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self._message = b"\0" + username.encode() + b"\0" + password.encode()
        self.done = False

    def first(self) -> bytes:
        return self._message

    def respond(self, server: bytes) -> bytes | None:
        del server
        self.done = True
        return None


def plain_check(message: bytes, verify: Callable[[str, str], bool]) -> str:
    """A server's check of a PLAIN message; returns the user name."""
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise SaslError("malformed PLAIN message")
    _authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
    if not user or not verify(user, password):
        raise SaslError("Authentication failed: Invalid username or password")  # (Kafka's)
    return user


# ----------------------------------------------------------------------------- SCRAM


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: bytes) -> dict[str, str]:
    try:
        text = message.decode()
        return dict(part.split("=", 1) for part in text.split(",") if part)
    except ValueError:
        raise SaslError("malformed SCRAM message") from None


@dataclass(frozen=True)
class ScramCredential:
    """What a server stores for a user: no password (Kafka's SCRAM credential)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def make(cls, mechanism: str, password: str, salt: bytes | None = None,
             iterations: int = SCRAM_MIN_ITERATIONS) -> ScramCredential:  # fmt: skip
        name = SCRAM_HASHES[mechanism]
        salt = salt or os.urandom(16)
        salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", name).digest()
        server_key = hmac.new(salted, b"Server Key", name).digest()
        return cls(salt, iterations, hashlib.new(name, client_key).digest(), server_key)


class ScramClient:
    """The client side of a SCRAM exchange: first() then respond() twice."""

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: str | None = None) -> None:  # fmt: skip
        self.hash = SCRAM_HASHES[mechanism]
        self._password = password
        self._nonce = nonce or _b64(os.urandom(24)).replace("=", "")
        self._bare = f"n={_escape(username)},r={self._nonce}"
        self._server_signature = b""
        self.done = False

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def respond(self, server: bytes) -> bytes | None:
        if self._server_signature:
            self._verify(server)
            return None
        fields = _attributes(server)
        if "e" in fields:
            raise SaslError(f"SCRAM: the server refused: {fields['e']}")
        nonce, salt, iterations = fields.get("r", ""), fields.get("s"), fields.get("i")
        if not nonce.startswith(self._nonce) or salt is None or iterations is None:
            raise SaslError("SCRAM: the server's first message is not valid")
        if int(iterations) < SCRAM_MIN_ITERATIONS:
            raise SaslError(f"SCRAM: {iterations} iterations is below Kafka's minimum")
        salted = hashlib.pbkdf2_hmac(
            self.hash, self._password.encode(), base64.b64decode(salt), int(iterations)
        )
        final_bare = f"c=biws,r={nonce}"
        auth = f"{self._bare},{server.decode()},{final_bare}".encode()
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored = hashlib.new(self.hash, client_key).digest()
        signature = hmac.new(stored, auth, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self._server_signature = hmac.new(server_key, auth, self.hash).digest()
        return f"{final_bare},p={_b64(proof)}".encode()

    def _verify(self, server: bytes) -> None:
        """The server's final message proves it knew the credential too."""
        fields = _attributes(server)
        if "e" in fields:
            raise SaslError(f"SCRAM: the server refused: {fields['e']}")
        if not hmac.compare_digest(base64.b64decode(fields.get("v", "")), self._server_signature):
            raise SaslError("SCRAM: the server's signature does not match: not the real server")
        self.done = True


class ScramServer:
    """The server side: respond() to the client's first, then to its final message."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 nonce: str | None = None) -> None:  # fmt: skip
        self.hash = SCRAM_HASHES[mechanism]
        self._lookup = lookup
        self._nonce = nonce or _b64(os.urandom(24)).replace("=", "")
        # (client-first bare, server-first, credential, GS2 header, combined nonce)
        self._state: tuple[str, str, ScramCredential, str, str] | None = None
        self.user: str | None = None

    def respond(self, client: bytes) -> bytes:
        if self._state is None:
            return self._first(client)
        return self._final(client)

    def _first(self, client: bytes) -> bytes:
        text = client.decode("utf-8", "replace")
        if not text.startswith(("n,,", "y,,")):
            raise SaslError("SCRAM: unsupported channel binding")
        gs2, bare = text[:3], text[3:]
        fields = _attributes(bare.encode())
        user, nonce = _unescape(fields.get("n", "")), fields.get("r", "")
        credential = self._lookup(user)
        if credential is None or not nonce:
            raise self._refused()
        server_first = f"r={nonce}{self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = (bare, server_first, credential, gs2, f"{nonce}{self._nonce}")
        self.user = user
        return server_first.encode()

    def _final(self, client: bytes) -> bytes:
        assert self._state is not None
        bare, server_first, credential, gs2, nonce = self._state
        text = client.decode("utf-8", "replace")
        without_proof, _, proof = text.rpartition(",p=")
        fields = _attributes(without_proof.encode())
        if fields.get("c") != _b64(gs2.encode()) or fields.get("r") != nonce:
            raise self._refused()  # RFC 5802: the channel binding and the nonce must match
        auth = f"{bare},{server_first},{without_proof}".encode()
        signature = hmac.new(credential.stored_key, auth, self.hash).digest()
        try:
            client_key = bytes(
                a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=True)
            )
        except ValueError:
            client_key = b""
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(),
                                   credential.stored_key):  # fmt: skip
            raise self._refused()
        server_signature = hmac.new(credential.server_key, auth, self.hash).digest()
        return f"v={_b64(server_signature)}".encode()

    def _refused(self) -> SaslError:
        mechanism = "SCRAM-SHA-256" if self.hash == "sha256" else "SCRAM-SHA-512"
        return SaslError(
            "Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}"
        )


# ----------------------------------------------------------------------------- OAUTHBEARER


class OAuthBearerClient:
    """RFC 7628's initial client response carrying a bearer token (and SASL extensions)."""

    def __init__(self, token: str, extensions: dict[str, str] | None = None) -> None:
        extras = "".join(f"{k}={v}\x01" for k, v in sorted((extensions or {}).items()))
        self._message = f"n,,\x01auth=Bearer {token}\x01{extras}\x01".encode()
        self.done = False
        self.refused_status: str | None = None  # the server's error status, once it sent one

    def first(self) -> bytes:
        return self._message

    def respond(self, server: bytes) -> bytes | None:
        """An error challenge (RFC 7628 §3.2.3: a JSON status) is answered with a single
        %x01, so that the server ends the exchange as failed and logs the refused login;
        any later server message after it is a protocol error."""
        if self.refused_status is not None:
            raise SaslError(f"OAUTHBEARER: the server refused the token ({self.refused_status})")
        if server:
            try:
                status = json.loads(server).get("status", "invalid_token")
            except (ValueError, AttributeError):
                status = "invalid_token"
            self.refused_status = str(status)
            return b"\x01"
        self.done = True
        return None


def oauthbearer_token(message: bytes) -> str:
    """The token of a client's OAUTHBEARER initial response (server side)."""
    text = message.decode("utf-8", "replace")
    for part in text.split("\x01"):
        if part.startswith("auth="):
            scheme, _, token = part[5:].partition(" ")
            if scheme.lower() == "bearer" and token:
                return token
    raise SaslError("OAUTHBEARER: no bearer token in the client's message")


def unsecured_jwt(subject: str, lifetime_s: int, now_s: float | None = None,
                  scope: str | None = None) -> str:  # fmt: skip
    """An unsigned JWT (alg none), as librdkafka's and the Java client's test mode make."""
    now = int(time.time() if now_s is None else now_s)
    claims: dict[str, object] = {"sub": subject, "iat": now, "exp": now + lifetime_s}
    if scope:
        claims["scope"] = scope
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{body}."


def check_unsecured_jwt(token: str, now_s: float) -> tuple[str, int]:
    """(subject, expiry in ms) of an unsecured JWT; raises SaslError if it is not one or
    has expired (the check Kafka's unsecured validator makes)."""
    try:
        header, body, signature = token.split(".")
        decoded = [base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)) for p in (header, body)]
        alg = json.loads(decoded[0]).get("alg")
        claims = json.loads(decoded[1])
    except (ValueError, AttributeError):
        raise SaslError("OAUTHBEARER: the token is not an unsecured JWT") from None
    if alg != "none" or signature or "sub" not in claims or "exp" not in claims:
        raise SaslError("OAUTHBEARER: the token is not an unsecured JWT with sub and exp")
    if float(claims["exp"]) <= now_s:
        raise SaslError("OAUTHBEARER: the token has expired")
    return str(claims["sub"]), int(float(claims["exp"]) * 1000)


SaslClient = PlainClient | ScramClient | OAuthBearerClient
