"""What the TLS and SASL tests share: certificates made with trustme, the settings of one
listener and of each client for it, the peers' token provider, and a confluent-kafka reader.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import trustme

from shmkafka.broker_stub.auth import SaslConfig
from shmkafka.broker_stub.server import BrokerStub, tls_context
from shmkafka.protocol.sasl import unsecured_jwt
from tests.integration.kafka_io import unique_topic

try:  # kafka-python 3
    from kafka.net.sasl.oauth import AbstractTokenProvider
except ImportError:  # kafka-python 2
    from kafka.sasl.oauth import AbstractTokenProvider  # type: ignore[no-redef]

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
COUNT = 20  # records per producer
PARTITIONS = 2


@dataclass(frozen=True)
class Certs:
    ca: str  # the CA the clients trust and the server checks client certificates against
    other_ca: str  # an unrelated CA
    server: tuple[str, str]  # (cert, key) for 127.0.0.1 and localhost
    client: tuple[str, str]  # a client certificate from ``ca``
    other_host: tuple[str, str]  # from ``ca``, but for another host name


def make_certs(d: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1 and localhost, a client certificate, an
    unrelated CA and a certificate for another host name, written under ``d``."""
    ca, other_ca = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    other_ca.cert_pem.write_to_path(str(d / "other-ca.pem"))
    pairs = {}
    for name, leaf in (
        ("server", ca.issue_cert("127.0.0.1", "localhost")),
        ("client", ca.issue_cert("client.example")),
        ("other-host", ca.issue_cert("other.example")),
    ):
        leaf.cert_chain_pems[0].write_to_path(str(d / f"{name}.pem"))
        leaf.private_key_pem.write_to_path(str(d / f"{name}.key"))
        pairs[name] = (str(d / f"{name}.pem"), str(d / f"{name}.key"))
    return Certs(str(d / "ca.pem"), str(d / "other-ca.pem"), pairs["server"], pairs["client"],
                 pairs["other-host"])  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """One listener (what the stub is given) and how the clients connect to it."""

    tls: bool = False
    mutual: bool = False  # the stub demands a client certificate
    mechanism: str | None = None
    server_cert: str = "server"  # or "other-host"
    client_ca: str = "ca"  # what the clients trust: "ca" or "other_ca"
    client_cert: bool = False  # the clients present one
    password: str | None = None  # None: the user's right one
    token_lifetime_s: int = 3600  # OAUTHBEARER (kafka-python's provider, confluent's oauth_cb)
    session_lifetime_ms: int = 0

    @property
    def protocol(self) -> str:
        if self.mechanism is None:
            return "SSL" if self.tls else "PLAINTEXT"
        return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"

    def stub(self, certs: Certs, nodes: int = 2) -> BrokerStub:
        context = None
        if self.tls:
            cert, key = certs.server if self.server_cert == "server" else certs.other_host
            context = tls_context(cert, key, certs.ca if self.mutual else None, self.mutual)
        sasl = None
        if self.mechanism is not None:
            sasl = SaslConfig.make([self.mechanism], USERS, self.session_lifetime_ms)
        return BrokerStub(nodes=nodes, partitions=PARTITIONS, ssl_context=context, sasl=sasl)

    def confluent(self, bootstrap: str, certs: Certs) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "security.protocol": self.protocol,
            "log_level": 0,
        }  # fmt: skip
        if self.tls:
            conf["ssl.ca.location"] = getattr(certs, self.client_ca)
            if self.client_cert:
                conf["ssl.certificate.location"], conf["ssl.key.location"] = certs.client
        if self.mechanism == "OAUTHBEARER":
            conf["sasl.mechanism"] = "OAUTHBEARER"
            if self.token_lifetime_s > 0:  # librdkafka makes its own unsecured JWT
                conf["enable.sasl.oauthbearer.unsecure.jwt"] = True
                conf["sasl.oauthbearer.config"] = "principal=alice"
            else:  # an expired one, handed over as a valid one would be
                token = unsecured_jwt("alice", self.token_lifetime_s)
                conf["oauth_cb"] = lambda _: (token, time.time() + 3600, "alice")
        elif self.mechanism is not None:
            conf["sasl.mechanism"] = self.mechanism
            conf["sasl.username"] = "alice"
            conf["sasl.password"] = self.password or USERS["alice"]
        return conf

    def kafka_python(self, bootstrap: str, certs: Certs) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap_servers": bootstrap, "security_protocol": self.protocol,
        }  # fmt: skip
        if self.tls:
            conf["ssl_cafile"] = getattr(certs, self.client_ca)
            if self.client_cert:
                conf["ssl_certfile"], conf["ssl_keyfile"] = certs.client
        if self.mechanism == "OAUTHBEARER":
            conf["sasl_mechanism"] = "OAUTHBEARER"
            conf["sasl_oauth_token_provider"] = TokenProvider("alice", self.token_lifetime_s)
        elif self.mechanism is not None:
            conf["sasl_mechanism"] = self.mechanism
            conf["sasl_plain_username"] = "alice"
            conf["sasl_plain_password"] = self.password or USERS["alice"]
        return conf


class TokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    def __init__(self, subject: str, lifetime_s: int) -> None:
        super().__init__()
        self.subject, self.lifetime_s = subject, lifetime_s

    def token(self) -> str:
        return unsecured_jwt(self.subject, self.lifetime_s)


def confluent_read(conf: dict[str, Any], topic: str, expected: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({**conf, "group.id": unique_topic("sec"),
                                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ])  # fmt: skip
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                values.append(msg.value())
        return values
    finally:
        consumer.close()
