"""shmkafka's three APIs over TLS and SASL, against broker_stub's secured listeners (proved
with confluent-kafka and kafka-python in tests/broker_stub/test_auth.py): records flow
for every protocol and mechanism and are read back by confluent-kafka's consumer; refusals
reach the app as typed errors within seconds (confluent-kafka's records wait for their
message.timeout.ms, as librdkafka's), with nothing written; OAUTHBEARER tokens from
a callback are refreshed across re-authentications; secrets never show in ``ps``, /dev/shm,
the logs or ``shmkafka stat``."""

from __future__ import annotations

import base64
import gc
import http.server
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors
import pytest

from shmkafka import KafkaProducer, Producer
from shmkafka.broker_stub.auth import SaslConfig
from shmkafka.broker_stub.server import BrokerStub, tls_context
from shmkafka.confluent_kafka import KafkaError
from shmkafka.protocol.sasl import unsecured_jwt
from tests.conftest import wait_removed
from tests.security import Certs, Setup, confluent_read, make_certs

try:  # kafka-python 3
    from kafka.net.sasl.oauth import AbstractTokenProvider
except ImportError:  # kafka-python 2
    from kafka.sasl.oauth import AbstractTokenProvider  # type: ignore[no-redef]

pytestmark = [
    pytest.mark.usefixtures("pool_removed"),
    # refused TLS handshakes leave sockets (the stub's, the peers') to the collector
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def collect_sockets() -> Iterator[None]:
    """Collected here, under this module's warning filter, not in a later test."""
    yield
    gc.collect()


RECORDS = 500
SECRET = "S3cr3t-do-not-show-7f4e"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _kafka_python_conf(setup: Setup, bootstrap: str, certs: Certs) -> dict[str, Any]:
    return setup.kafka_python(bootstrap, certs)


def _confluent_conf(setup: Setup, bootstrap: str, certs: Certs) -> dict[str, Any]:
    conf = setup.confluent(bootstrap, certs)
    conf.pop("log_level", None)
    return conf


def _produce_kafka_python(conf: dict[str, Any], pool: str, topic: str) -> None:
    with KafkaProducer(pool=pool, linger_ms=5, **conf) as p:
        futures = [p.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(RECORDS)]
        p.flush(30)
    assert all(f.succeeded() for f in futures), next(f.exception for f in futures if f.failed())


def _produce_confluent(conf: dict[str, Any], pool: str, topic: str) -> None:
    errors: list[Any] = []
    with Producer({**conf, "shmkafka.pool": pool, "linger.ms": 5}) as p:
        for i in range(RECORDS):
            p.produce(topic, b"v%d" % i, b"k%d" % i, on_delivery=lambda e, m: errors.append(e))
        assert p.flush(30) == 0
    assert errors == [None] * RECORDS


SETUPS = [
    pytest.param(Setup(tls=True), id="SSL"),
    pytest.param(Setup(tls=True, mutual=True, client_cert=True), id="SSL-mutual"),
    pytest.param(Setup(mechanism="PLAIN"), id="SASL_PLAINTEXT-PLAIN"),
    pytest.param(Setup(mechanism="SCRAM-SHA-256"), id="SASL_PLAINTEXT-SCRAM-SHA-256"),
    pytest.param(Setup(mechanism="SCRAM-SHA-512"), id="SASL_PLAINTEXT-SCRAM-SHA-512"),
    pytest.param(Setup(mechanism="OAUTHBEARER"), id="SASL_PLAINTEXT-OAUTHBEARER"),
    pytest.param(Setup(tls=True, mechanism="SCRAM-SHA-512"), id="SASL_SSL-SCRAM-SHA-512"),
    pytest.param(Setup(tls=True, mechanism="PLAIN"), id="SASL_SSL-PLAIN"),
]


@pytest.mark.parametrize("api", ["kafka-python", "confluent"])
@pytest.mark.parametrize("setup", SETUPS)
def test_records_flow_and_are_read_back(
    certs: Certs, setup: Setup, api: str, pool_name: str
) -> None:
    with setup.stub(certs) as stub:
        topic = f"secured-{api}"
        if api == "kafka-python":
            _produce_kafka_python(_kafka_python_conf(setup, stub.bootstrap, certs), pool_name,
                                  topic)  # fmt: skip
        else:
            _produce_confluent(_confluent_conf(setup, stub.bootstrap, certs), pool_name, topic)
        reader = setup.confluent(stub.bootstrap, certs)
        values = confluent_read(reader, topic, RECORDS)
    assert sorted(values) == sorted(b"v%d" % i for i in range(RECORDS))  # each exactly once


REFUSALS = [
    pytest.param(Setup(mechanism="PLAIN", password="wrong"), "auth", id="PLAIN-wrong-password"),
    pytest.param(
        Setup(mechanism="SCRAM-SHA-256", password="wrong"), "auth", id="SCRAM-wrong-password"
    ),
    pytest.param(
        Setup(mechanism="OAUTHBEARER", token_lifetime_s=-60), "auth", id="OAUTHBEARER-expired"
    ),
    pytest.param(Setup(tls=True, client_ca="other_ca"), "ssl", id="untrusted-CA"),
    pytest.param(Setup(tls=True, server_cert="other-host"), "ssl", id="wrong-host-name"),
]


@pytest.mark.parametrize(("setup", "kind"), REFUSALS)
def test_kafka_python_refusals_are_typed_and_fast(
    certs: Certs, setup: Setup, kind: str, pool_name: str
) -> None:
    conf = _kafka_python_conf(setup, "", certs)
    expected = (kafka.errors.SaslAuthenticationFailedError if kind == "auth"
                else kafka.errors.KafkaConnectionError)  # fmt: skip
    with setup.stub(certs) as stub:
        conf["bootstrap_servers"] = stub.bootstrap
        started = time.monotonic()
        with (
            KafkaProducer(pool=pool_name, max_block_ms=30_000, **conf) as p,
            pytest.raises(expected) as raised,
        ):
            p.send("refused", b"x")
        took = time.monotonic() - started
        assert took < 30
        assert "refused" not in stub.cluster.topics  # nothing written
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize(("setup", "kind"), REFUSALS)
def test_confluent_refusals_reach_error_cb_and_records_wait_their_timeout(
    certs: Certs, setup: Setup, kind: str, pool_name: str
) -> None:
    """As librdkafka (tests/integration/test_sasl_credentials.py runs both side by side):
    error_cb hears of the refusal within seconds; the record waits for a login that works
    until message.timeout.ms, then is reported _MSG_TIMED_OUT."""
    code = KafkaError._AUTHENTICATION if kind == "auth" else KafkaError._SSL
    errors: list[Any] = []
    reports: list[Any] = []
    with setup.stub(certs) as stub:
        conf = _confluent_conf(setup, stub.bootstrap, certs)
        p = Producer({**conf, "shmkafka.pool": pool_name, "error_cb": errors.append,
                      "message.timeout.ms": 3000})  # fmt: skip
        started = time.monotonic()
        p.produce("refused", b"x", on_delivery=lambda e, m: reports.append(e))
        deadline = started + 30
        while not reports and time.monotonic() < deadline:
            p.poll(0.1)
        took = time.monotonic() - started
        p.close()
        assert "refused" not in stub.cluster.topics  # nothing written
    assert 2.9 <= took < 30
    assert [e.code() for e in reports] == [KafkaError._MSG_TIMED_OUT]
    assert code in [e.code() for e in errors]


def _sasl_ssl_stub(certs: Certs, mechanism: str, lifetime_ms: int = 0) -> BrokerStub:
    cert, key = certs.server
    sasl = SaslConfig.make([mechanism], {"carol": SECRET}, lifetime_ms)
    return BrokerStub(nodes=2, partitions=2, ssl_context=tls_context(cert, key), sasl=sasl)


def _carol(bootstrap: str, certs: Certs) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap, "security_protocol": "SASL_SSL",
        "ssl_cafile": certs.ca, "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "carol", "sasl_plain_password": SECRET,
    }  # fmt: skip


def _reader(bootstrap: str, certs: Certs) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
        "ssl.ca.location": certs.ca, "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "carol", "sasl.password": SECRET,
    }  # fmt: skip


def test_secrets_never_show(certs: Certs, pool_name: str, caplog: pytest.LogCaptureFixture) -> None:
    """The password is nowhere another process or a log could show it: not in any command
    line (the Sender's included), not in the pool's files, not in the logs, not in
    ``shmkafka stat``."""
    with (
        _sasl_ssl_stub(certs, "SCRAM-SHA-512") as stub,
        caplog.at_level(logging.DEBUG),
        KafkaProducer(pool=pool_name, **_carol(stub.bootstrap, certs)) as p,
    ):
        for i in range(50):
            p.send("secret-topic", b"v%d" % i)
        p.flush(30)
        sender_pid = p._handle.pool.sender()[0]
        assert sender_pid > 0
        processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True)
        assert SECRET not in processes.stdout
        assert "--config-json -" in Path(f"/proc/{sender_pid}/cmdline").read_bytes().decode(
            errors="replace"
        ).replace("\0", " ")
        for name in os.listdir("/dev/shm"):
            if pool_name in name:
                assert SECRET.encode() not in Path("/dev/shm", name).read_bytes(), name
        stat = subprocess.run(
            [sys.executable, "-m", "shmkafka", "stat", "--pool", pool_name, "--json"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert json.loads(stat.stdout) and SECRET not in stat.stdout
        assert SECRET not in repr(p._client.config)
    assert SECRET not in caplog.text


def _reauthenticated_twice(stub: BrokerStub) -> bool:
    return stub.auth_events().get("reauthenticated", 0) >= 2


def test_oauthbearer_tokens_are_refreshed_across_reauthentication(
    certs: Certs, pool_name: str
) -> None:
    """A callback's tokens reach the Sender through the pool; the broker's short sessions
    make it authenticate again, with fresh tokens, while records keep flowing."""
    calls: list[float] = []

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            calls.append(time.monotonic())
            return unsecured_jwt("carol", 2)  # short-lived: fresh ones are needed in the run

    sasl = SaslConfig.make(["OAUTHBEARER"], None, session_lifetime_ms=1500)
    with BrokerStub(nodes=1, partitions=1, sasl=sasl) as stub:
        conf = {
            "bootstrap_servers": stub.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Provider(),
        }  # fmt: skip
        with KafkaProducer(pool=pool_name, **conf) as p:
            futures = []
            # Records flow until the broker has seen two re-authentications and the callback
            # has given a fresh token (a slow machine may take seconds to start the Sender,
            # and a token may serve more than one session: no fixed duration is long enough).
            deadline = time.monotonic() + 60
            while (not _reauthenticated_twice(stub) or len(calls) < 2) and (
                time.monotonic() < deadline
            ):
                futures.append(p.send("tokens", b"x"))
                time.sleep(0.02)
            p.flush(30)
        events = stub.auth_events()
    assert all(f.succeeded() for f in futures)
    assert events.get("reauthenticated", 0) >= 2 and not events.get("expired")
    assert len(calls) >= 2  # fresh tokens, from the app process's callback


def test_sender_killed_on_sasl_ssl_with_idempotence(certs: Certs, pool_name: str) -> None:
    """SIGKILL the Sender mid-run: a new one authenticates again and re-sends; every record
    is read back exactly once."""
    with _sasl_ssl_stub(certs, "SCRAM-SHA-512") as stub:
        with KafkaProducer(pool=pool_name, enable_idempotence=True, linger_ms=2,
                           **_carol(stub.bootstrap, certs)) as p:  # fmt: skip
            futures = []
            for i in range(1000):
                futures.append(p.send("killed", b"v%d" % i, key=b"k%d" % (i % 7)))
                if i == 300:
                    pid = p._handle.pool.sender()[0]
                    os.kill(pid, signal.SIGKILL)
            p.flush(60)
        assert all(f.succeeded() for f in futures)
        values = confluent_read(_reader(stub.bootstrap, certs), "killed", 1000)
    assert sorted(values) == sorted(b"v%d" % i for i in range(1000))


class _TokenEndpoint(http.server.BaseHTTPRequestHandler):
    """An OAuth 2 token endpoint: the client-credentials grant, HTTP Basic client auth."""

    issued: list[str] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        expected = base64.b64encode(b"shm-client:" + SECRET.encode()).decode()
        if self.headers.get("Authorization") != f"Basic {expected}" or (
            "grant_type=client_credentials" not in body
        ):
            self.send_response(401)
            self.end_headers()
            return
        token = unsecured_jwt("shm-client", 60)
        self.issued.append(token)
        answer = json.dumps({"access_token": token, "token_type": "bearer", "expires_in": 60})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args: Any) -> None:
        del args


def test_confluent_oidc_and_oauth_cb_tokens(certs: Certs, pool_name: str) -> None:
    """OAUTHBEARER tokens from an OIDC token endpoint (the Sender's own client-credentials
    grant) and from confluent-kafka's ``oauth_cb`` (through the pool's token board)."""
    endpoint = http.server.HTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    thread = threading.Thread(target=endpoint.serve_forever, daemon=True)
    thread.start()
    called: list[str | None] = []

    def oauth_cb(config: str | None) -> tuple[str, float]:
        called.append(config)
        return unsecured_jwt("shm-callback", 60), time.time() + 60

    sasl = SaslConfig.make(["OAUTHBEARER"], None)
    try:
        with BrokerStub(nodes=1, partitions=1, sasl=sasl) as stub:
            base = {"bootstrap.servers": stub.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "OAUTHBEARER"}  # fmt: skip
            oidc = {**base, "sasl.oauthbearer.method": "oidc",
                    "sasl.oauthbearer.token.endpoint.url":
                        f"http://127.0.0.1:{endpoint.server_port}/token",
                    "sasl.oauthbearer.client.id": "shm-client",
                    "sasl.oauthbearer.client.secret": SECRET}  # fmt: skip
            _produce_confluent(oidc, pool_name, "oidc")
            callback = {**base, "oauth_cb": oauth_cb, "sasl.oauthbearer.config": "scope=x"}
            _produce_confluent(callback, pool_name + "cb", "callback")
    finally:
        endpoint.shutdown()
        endpoint.server_close()
    assert _TokenEndpoint.issued  # the Sender fetched its tokens itself
    assert called and called[0] == "scope=x"  # confluent-kafka passes the config string
    wait_removed(pool_name + "cb")  # (the pool_removed fixture waits for the first one)


def test_confluent_inline_pems_for_mutual_tls(certs: Certs, pool_name: str) -> None:
    """``ssl.ca.pem``, ``ssl.certificate.pem`` and ``ssl.key.pem`` given inline (the key is
    a secret: it reaches the Sender through its pipe, never a file of ours that stays)."""
    setup = Setup(tls=True, mutual=True, client_cert=True)
    cert, key = certs.client
    with setup.stub(certs) as stub:
        conf = {"bootstrap.servers": stub.bootstrap, "security.protocol": "SSL",
                "ssl.ca.pem": Path(certs.ca).read_text(),
                "ssl.certificate.pem": Path(cert).read_text(),
                "ssl.key.pem": Path(key).read_text()}  # fmt: skip
        _produce_confluent(conf, pool_name, "inline")
        values = confluent_read(setup.confluent(stub.bootstrap, certs), "inline", RECORDS)
    assert sorted(values) == sorted(b"v%d" % i for i in range(RECORDS))


def test_different_credentials_never_share_a_pool() -> None:
    from shmkafka.pool.config import SenderConfig

    base = {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u"}
    one = SenderConfig(**base, sasl_password=SECRET).identity()  # type: ignore[arg-type]
    two = SenderConfig(**base, sasl_password=SECRET + "x").identity()  # type: ignore[arg-type]
    assert one != two  # so the default pool names differ too
    assert SECRET not in json.dumps(one) and one["sasl_password"].startswith("scrypt:")


def test_no_common_mechanism_is_reported_fast(pool_name: str) -> None:
    """The broker enables SCRAM only; a PLAIN client hears so through error_cb within
    seconds, and its record waits until message.timeout.ms, as librdkafka's."""
    errors: list[Any] = []
    reports: list[Any] = []
    sasl = SaslConfig.make(["SCRAM-SHA-256"], {"alice": "pw"})
    with BrokerStub(nodes=1, partitions=1, sasl=sasl) as stub:
        p = Producer({"bootstrap.servers": stub.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": "pw",
                      "shmkafka.pool": pool_name, "error_cb": errors.append,
                      "message.timeout.ms": 3000})  # fmt: skip
        p.produce("t", b"x", on_delivery=lambda e, m: reports.append(e))
        deadline = time.monotonic() + 30
        while not reports and time.monotonic() < deadline:
            p.poll(0.1)
        p.close()
    assert [e.code() for e in reports] == [KafkaError._MSG_TIMED_OUT]
    assert any("Unsupported SASL mechanism" in e.str() and "SCRAM-SHA-256" in e.str()
               for e in errors)  # fmt: skip


def test_aiokafka_async_token_provider_across_reauthentication(pool_name: str) -> None:
    """aiokafka's ``AbstractTokenProvider`` with an async ``token()``: the Sender's token
    requests are answered on the app's event loop while it sends, fresh ones at each
    re-authentication."""
    import asyncio

    from shmkafka.aiokafka import AIOKafkaProducer
    from shmkafka.aiokafka.abc import AbstractTokenProvider as AioTokenProvider

    calls: list[float] = []

    class Provider(AioTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            await asyncio.sleep(0)  # (a coroutine that yields, as a real one would)
            calls.append(time.monotonic())
            return unsecured_jwt("carol", 2)

    sasl = SaslConfig.make(["OAUTHBEARER"], None, session_lifetime_ms=1500)
    with BrokerStub(nodes=1, partitions=1, sasl=sasl) as stub:

        async def body() -> list[Any]:
            async with AIOKafkaProducer(
                bootstrap_servers=stub.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider(),
                pool=pool_name,
            ) as p:  # fmt: skip
                futures = []
                # (as above: two re-authentications may share one token)
                deadline = time.monotonic() + 60
                while (not _reauthenticated_twice(stub) or len(calls) < 2) and (
                    time.monotonic() < deadline
                ):
                    futures.append(await p.send("aiotokens", b"x"))
                    await asyncio.sleep(0.02)
                return list(await asyncio.gather(*futures))

        metas = asyncio.run(body())
        events = stub.auth_events()
    assert metas and all(m.topic == "aiotokens" and m.offset >= 0 for m in metas)
    assert [m.offset for m in metas] == list(range(len(metas)))
    assert events.get("reauthenticated", 0) >= 2 and not events.get("expired")
    assert len(calls) >= 2


def test_an_oauthbearer_error_challenge_is_answered_so_the_broker_logs_the_refusal(
    certs: Certs, pool_name: str
) -> None:
    """RFC 7628 §3.2.3: after the broker's JSON error status the client sends a single %x01,
    and the broker ends the exchange as failed (counted here, as Kafka logs the refused
    login) instead of seeing the connection dropped; the app gets the typed refusal."""
    setup = Setup(mechanism="OAUTHBEARER", token_lifetime_s=-60)
    conf = _kafka_python_conf(setup, "", certs)
    with setup.stub(certs) as stub:
        conf["bootstrap_servers"] = stub.bootstrap
        with (
            KafkaProducer(pool=pool_name, max_block_ms=30_000, **conf) as p,
            pytest.raises(kafka.errors.SaslAuthenticationFailedError) as raised,
        ):
            p.send("refused", b"x")
        events = stub.auth_events()
    assert events.get("failed", 0) >= 1 and not events.get("authenticated")
    assert "invalid_token" in str(raised.value)
