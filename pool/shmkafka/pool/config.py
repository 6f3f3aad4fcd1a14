"""A producer's configuration: one validated, frozen ``Config``, built once from an API's
arguments (``Config.build``), with Kafka's names (dots become underscores). Both process kinds
read it: app processes validate it and record it in the pool before any Sender exists, and
the Sender gets its ``sender`` part.

Its parts, by who must agree on them:
- ``sender`` (``SenderConfig``): delivery and the broker connections (TLS, SASL); one Sender
  serves the pool, so every producer of a pool has the same.
- ``pool`` (shm/config.py's ``PoolConfig``): the sizes of the segment, which stores them.
- ``pool_name`` and ``max_block_ms``: this process's own.

The pool records the first two (``pool.sender_settings`` holds ``sender.identity()``);
attaching with other values is a ``PoolSettingsMismatchError`` naming the keys. The default
pool name is a hash of the uid and those settings, so identically configured processes share
a pool without naming one, and differently configured ones do not meet. Bootstrap server lists
are parsed here, once, for the three APIs.

Rules:
- Secrets (``SECRET_FIELDS``: passwords, a private key given inline, an OAuth client
  secret) and inline PEM texts never go into the pool: ``identity()`` is the settings as
  recorded there (for the pool-name hash and the settings check), with each of them
  replaced by a salted scrypt digest, so producers with different credentials never share a
  pool and the pool does not reveal them. The Sender gets the real values through a pipe
  (supervisor.py), never on its command line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from shmkafka.pool.errors import KafkaConfigurationError
from shmkafka.protocol.compression import CompressionType, check_level
from shmkafka.protocol.errors import EncodeError, KafkaError
from shmkafka.shm.config import PoolConfig, validate_pool_name
from shmkafka.shm.errors import ShmError

DEFAULT_PORT = 9092


class SenderConfigError(KafkaConfigurationError):
    """A Sender setting is invalid; the message names it."""


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTH_METHODS = ("callback", "oidc", "unsecured")
SECRET_FIELDS = ("ssl_password", "ssl_key_pem", "sasl_password", "oauth_client_secret")
DIGESTED_FIELDS = (*SECRET_FIELDS, "ssl_ca_pem", "ssl_cert_pem")
_DIGEST_SALT = b"shmkafka settings identity v1"


@dataclass(frozen=True)
class SenderConfig:
    bootstrap_servers: tuple[str, ...] = ("127.0.0.1:9092",)
    client_id: str = "shmkafka"
    acks: int = -1
    compression_type: str = "none"
    compression_level: int | None = None
    linger_ms: int = 5
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    max_in_flight_requests_per_connection: int = 5
    enable_idempotence: bool = True
    metadata_max_age_ms: int = 300_000
    metadata_max_idle_ms: int = 300_000  # an idle topic's deques go back to the pool
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    max_request_size: int = 1024 * 1024
    # transactions: a transactional id has a pool (and a Sender) of its own
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    # connections: TLS
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = None
    ssl_ca_pem: str | None = None
    ssl_cert_pem: str | None = None
    ssl_key_pem: str | None = None
    ssl_crlfile: str | None = None
    ssl_ciphers: str | None = None
    ssl_check_hostname: bool = True
    ssl_verify: bool = True
    # connections: SASL
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = None
    oauth_method: str = "callback"  # how the Sender gets OAUTHBEARER tokens
    oauth_token_endpoint_url: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: str | None = None
    oauth_scope: str | None = None
    oauth_unsecured_principal: str = "admin"  # the sub of an unsecured JWT
    oauth_unsecured_lifetime_s: int = 3600
    # a refused login (SASL or TLS) while no broker connection is up fails every queued
    # record at once (kafka-python, aiokafka, Java); False: they wait for a login that
    # works, until delivery_timeout_ms (librdkafka)
    refused_login_fails_records: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.acks, int) or not -1 <= self.acks <= 1000:
            # (above 1: librdkafka passes it on; brokers answer INVALID_REQUIRED_ACKS)
            raise SenderConfigError(f"acks must be -1 (all) to 1000, got {self.acks!r}")
        try:
            codec = CompressionType.from_name(self.compression_type)
            check_level(codec, self.compression_level)
        except EncodeError as exc:
            raise SenderConfigError(f"compression_type/compression_level: {exc}") from None
        for name in ("linger_ms", "retries", "retry_backoff_ms", "request_timeout_ms",
                     "metadata_max_age_ms", "reconnect_backoff_ms"):  # fmt: skip
            if getattr(self, name) < 0:
                raise SenderConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.metadata_max_idle_ms < 1:
            raise SenderConfigError(
                f"metadata_max_idle_ms must be >= 1, got {self.metadata_max_idle_ms}"
            )
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise SenderConfigError("retry_backoff_max_ms must be >= retry_backoff_ms")
        if self.delivery_timeout_ms < 1:
            raise SenderConfigError(
                f"delivery_timeout_ms must be >= 1, got {self.delivery_timeout_ms}"
            )
        if self.max_in_flight_requests_per_connection < 1:
            raise SenderConfigError("max_in_flight_requests_per_connection must be >= 1")
        if self.enable_idempotence:
            if self.acks != -1:
                raise SenderConfigError("enable_idempotence requires acks=all (-1)")
            if self.max_in_flight_requests_per_connection > 5:
                raise SenderConfigError(
                    "enable_idempotence requires max_in_flight_requests_per_connection <= 5"
                )
            if self.retries == 0:
                raise SenderConfigError("enable_idempotence requires retries > 0")
        if self.transactional_id is not None:
            self._check_transactional()
        if not self.bootstrap_servers:
            raise SenderConfigError("bootstrap_servers is empty")
        for server in self.bootstrap_servers:
            split_address(server)
        self._check_security()

    def _check_transactional(self) -> None:
        if not isinstance(self.transactional_id, str) or not self.transactional_id:
            raise SenderConfigError(
                f"transactional_id must be a non-empty str, got {self.transactional_id!r}"
            )
        if not self.enable_idempotence:
            raise SenderConfigError("a transactional_id requires enable_idempotence")
        if not isinstance(self.transaction_timeout_ms, int) or self.transaction_timeout_ms < 1:
            raise SenderConfigError(
                f"transaction_timeout_ms must be >= 1, got {self.transaction_timeout_ms!r}"
            )

    def _check_security(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise SenderConfigError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                f"got {self.security_protocol!r}"
            )
        if self.sasl and self.sasl_mechanism not in SASL_MECHANISMS:
            raise SenderConfigError(
                f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                f"got {self.sasl_mechanism!r}"
            )
        if (
            self.sasl
            and self.sasl_mechanism != "OAUTHBEARER"
            and (self.sasl_username is None or self.sasl_password is None)
        ):
            raise SenderConfigError(f"sasl_mechanism {self.sasl_mechanism} needs a username "
                                    "and a password")  # fmt: skip
        if self.oauth_method not in OAUTH_METHODS:
            raise SenderConfigError(f"oauth_method must be one of {', '.join(OAUTH_METHODS)}")
        if (
            self.sasl_mechanism == "OAUTHBEARER"
            and self.oauth_method == "oidc"
            and not (
                self.oauth_token_endpoint_url and self.oauth_client_id and self.oauth_client_secret
            )
        ):
            raise SenderConfigError("OIDC needs a token endpoint URL, a client id and a secret")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def identity(self) -> dict[str, Any]:
        """The settings as the pool records them: secrets and inline PEMs as digests."""
        fields = dataclasses.asdict(self)
        if not self.sasl:  # (a mechanism's default differs by API, and means nothing here)
            fields["sasl_mechanism"] = None
        if not (self.sasl or self.tls):  # (no login to refuse: as above)
            fields["refused_login_fails_records"] = None
        for name in DIGESTED_FIELDS:
            if fields[name] is not None:
                fields[name] = "scrypt:" + _digest(fields[name])
        return fields

    def __repr__(self) -> str:  # (never a secret in a log line or an exception)
        shown = {k: ("<secret>" if k in SECRET_FIELDS and v is not None else v)
                 for k, v in dataclasses.asdict(self).items()}  # fmt: skip
        return f"SenderConfig({shown})"

    @property
    def compression(self) -> CompressionType:
        return CompressionType.from_name(self.compression_type)

    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        return [split_address(server) for server in self.bootstrap_servers]

    def replace(self, **changes: object) -> SenderConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _digest(value: str) -> str:
    # scrypt: costly to guess from, even for someone who can read the pool (its owner)
    return hashlib.scrypt(value.encode(), salt=_DIGEST_SALT, n=2**12, r=8, p=1).hex()[:40]


def split_address(server: str) -> tuple[str, int]:
    """``"host:9092"`` or ``"[::1]:9092"`` → (host, port)."""
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit():
        raise SenderConfigError(f"bootstrap server {server!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def normalize_bootstrap(servers: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``"a:1,b"`` or ``["a:1", "b"]`` → ``("a:1", "b:9092")`` (Kafka's default port)."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        if not isinstance(item, str):
            raise SenderConfigError(f"bootstrap server {item!r} is not a string")
        item = item.strip()
        if not item:
            continue
        if ":" not in item or item.endswith("]"):  # "host" or "[::1]": no port given
            item = f"{item}:{DEFAULT_PORT}"
        out.append(item)
    if not out:
        raise SenderConfigError("bootstrap_servers is empty")
    return tuple(out)


POOL_KEYS = tuple(f.name for f in dataclasses.fields(PoolConfig) if f.name != "sender_settings")


@dataclass(frozen=True)
class Config:
    """Everything a producer needs: validated, with Kafka's names."""

    sender: SenderConfig
    pool: PoolConfig
    pool_name: str | None = None
    max_block_ms: int = 60_000
    # How long an append waits for room in a full pool (None: max_block_ms); the
    # confluent-kafka API, whose other calls block for nothing, waits a little here.
    memory_block_ms: int | None = None

    @classmethod
    def build(
        cls, sender: dict[str, Any], pool: dict[str, Any], pool_name: str | None,
        max_block_ms: int, memory_block_ms: int | None = None,
    ) -> Config:  # fmt: skip
        try:
            sender_config = SenderConfig(**sender)
            blob = json.dumps(sender_config.identity(), sort_keys=True)
            pool_config = PoolConfig(
                **pool,
                max_request_size=sender_config.max_request_size,
                sender_settings=blob,
            )
            if pool_name is not None:
                validate_pool_name(pool_name)
        except (KafkaError, ShmError, TypeError, ValueError) as exc:
            raise KafkaConfigurationError(str(exc)) from None
        if pool_config.durable and not sender_config.enable_idempotence:
            raise KafkaConfigurationError(
                f"pool_durability={pool_config.pool_durability!r} needs the idempotent "
                "producer (enable_idempotence / enable.idempotence=true): after a power cut "
                "the broker's duplicate detection makes the recovery's resend exactly once"
            )
        for name, value in (("max_block_ms", max_block_ms), ("memory_block_ms", memory_block_ms)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise KafkaConfigurationError(f"{name} must be >= 0, got {value!r}")
        return cls(sender_config, pool_config, pool_name, max_block_ms, memory_block_ms)

    def default_pool_name(self) -> str:
        digest = hashlib.sha256(f"{os.getuid()}\n{self.pool.to_json().decode()}".encode())
        return "p" + digest.hexdigest()[:20]

    @property
    def chosen_pool_name(self) -> str:
        return self.pool_name or self.default_pool_name()

    def differences(self, stored: PoolConfig) -> list[str]:
        """The keys the pool was made with other values of, each with both values."""
        out = [
            f"{key} (pool has {getattr(stored, key)!r}, asked {getattr(self.pool, key)!r})"
            for key in POOL_KEYS
            if getattr(stored, key) != getattr(self.pool, key)
        ]
        mine = json.loads(self.pool.sender_settings or "{}")
        theirs = json.loads(stored.sender_settings or "{}")
        out += [
            f"{key} (pool has {theirs.get(key)!r}, asked {mine.get(key)!r})"
            for key in sorted(set(mine) | set(theirs))
            if mine.get(key) != theirs.get(key)
        ]
        return out
