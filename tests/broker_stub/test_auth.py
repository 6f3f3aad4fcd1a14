"""broker_stub's TLS listener and SASL server, proved with two independent real clients,
confluent-kafka (librdkafka) and kafka-python: records produced over SSL, mutual TLS,
SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) and SASL_SSL are read back
by both clients' consumers; a wrong password, an expired token, a missing client
certificate, an untrusted CA and a wrong host name fail with each client's own errors;
both clients re-authenticate (KIP-368) and a client that does not is disconnected. The
certificates are made here with trustme; every server listens on 127.0.0.1.

The SASL state machine's answers (out-of-order requests, unknown mechanisms, Kafka's error
messages) are checked on the wire with our own codec, and the command line in a subprocess.
"""

from __future__ import annotations

import gc
import logging
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import kafka
import kafka.errors
import pytest

from shmkafka.broker_stub.__main__ import build_parser, run, security
from shmkafka.broker_stub.auth import SaslConfig
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from shmkafka.protocol.sasl import PlainClient, ScramClient, unsecured_jwt
from tests.integration.kafka_io import unique_topic
from tests.security import (
    COUNT,
    PARTITIONS,
    USERS,
    Certs,
    Setup,
    confluent_read,
    make_certs,
)
from tests.wire import WireClient

pytestmark = [
    # kafka-python leaves its sockets to the collector when its __init__ raises
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

REFUSED_WITHIN_MS = 1500  # kafka-python's bootstrap_timeout_ms in the negative cases


@pytest.fixture(autouse=True)
def collect_peer_sockets() -> Iterator[None]:
    """kafka-python's half-built clients' sockets are collected here, under this module's
    warning filter, not in a later test."""
    yield
    gc.collect()


# ----------------------------------------------------------------------------- certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


# ----------------------------------------------------------------------------- client settings


# ----------------------------------------------------------------------------- the clients


def confluent_produce(conf: dict[str, Any], topic: str, count: int = COUNT) -> None:
    producer = confluent_kafka.Producer({**conf, "linger.ms": 5})
    reports: list[Any] = []
    for i in range(count):
        producer.produce(topic, b"cf-%d" % i, b"k%d" % i,
                         on_delivery=lambda err, msg: reports.append(err))  # fmt: skip
    assert producer.flush(20) == 0
    assert reports == [None] * count


def kafka_python_produce(conf: dict[str, Any], topic: str, count: int = COUNT) -> None:
    producer = kafka.KafkaProducer(linger_ms=5, **conf)
    try:
        futures = [producer.send(topic, b"kp-%d" % i, key=b"k%d" % i) for i in range(count)]
        producer.flush(20)
        assert all(f.succeeded() for f in futures), [f.exception for f in futures]
    finally:
        producer.close(5)


def kafka_python_read(conf: dict[str, Any], topic: str, expected: int) -> list[bytes]:
    consumer = kafka.KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=20_000, **conf)
    try:
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        values: list[bytes] = []
        for record in consumer:
            values.append(record.value)
            if len(values) >= expected:
                break
        return values
    finally:
        consumer.close()


def expected_values() -> list[bytes]:
    return sorted([b"cf-%d" % i for i in range(COUNT)] + [b"kp-%d" % i for i in range(COUNT)])


# ----------------------------------------------------------------------------- records flow


@pytest.mark.parametrize(
    "setup",
    [
        pytest.param(Setup(tls=True), id="SSL"),
        pytest.param(Setup(tls=True, mutual=True, client_cert=True), id="SSL-mutual"),
        pytest.param(Setup(mechanism="PLAIN"), id="SASL_PLAINTEXT-PLAIN"),
        pytest.param(Setup(mechanism="SCRAM-SHA-256"), id="SASL_PLAINTEXT-SCRAM-SHA-256"),
        pytest.param(Setup(mechanism="SCRAM-SHA-512"), id="SASL_PLAINTEXT-SCRAM-SHA-512"),
        pytest.param(Setup(mechanism="OAUTHBEARER"), id="SASL_PLAINTEXT-OAUTHBEARER"),
        pytest.param(Setup(tls=True, mechanism="PLAIN"), id="SASL_SSL-PLAIN"),
        pytest.param(
            Setup(tls=True, mutual=True, client_cert=True, mechanism="SCRAM-SHA-512"),
            id="SASL_SSL-mutual-SCRAM-SHA-512",
        ),
    ],
)
def test_both_clients_produce_and_read_back(certs: Certs, setup: Setup) -> None:
    topic = unique_topic("sec")
    with setup.stub(certs) as stub:
        cf, kp = setup.confluent(stub.bootstrap, certs), setup.kafka_python(stub.bootstrap, certs)
        confluent_produce(cf, topic)
        kafka_python_produce(kp, topic)
        assert sorted(confluent_read(cf, topic, 2 * COUNT)) == expected_values()
        assert sorted(kafka_python_read(kp, topic, 2 * COUNT)) == expected_values()
        events = stub.auth_events()
    if setup.mechanism is not None:
        assert events.get("authenticated", 0) >= 4 and "failed" not in events, events
    else:
        assert events == {}


# ----------------------------------------------------------------------------- refusals


def confluent_errors(conf: dict[str, Any], consumer: bool = False) -> list[Any]:
    """The errors a client's error_cb got until the first that is not _ALL_BROKERS_DOWN."""
    errors: list[Any] = []
    conf = {**conf, "error_cb": errors.append}
    client: Any
    if consumer:
        client = confluent_kafka.Consumer({**conf, "group.id": unique_topic("sec")})
        client.assign([confluent_kafka.TopicPartition("refused", 0)])
    else:
        client = confluent_kafka.Producer(conf)
        client.produce("refused", b"v")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        client.poll(0.05)
        if any(e.code() != confluent_kafka.KafkaError._ALL_BROKERS_DOWN for e in errors):
            break
    if consumer:
        client.close()
    else:
        client.purge()
        client.flush(0)
    return [e for e in errors if e.code() != confluent_kafka.KafkaError._ALL_BROKERS_DOWN]


def kafka_python_refusal(
    conf: dict[str, Any], caplog: pytest.LogCaptureFixture, consumer: bool = False
) -> tuple[BaseException, str]:
    """kafka-python's constructor bootstraps: a refused connection is retried until
    bootstrap_timeout_ms, then KafkaTimeoutError; the reason is only in its log."""
    caplog.clear()
    client = kafka.KafkaConsumer if consumer else kafka.KafkaProducer
    with (
        caplog.at_level(logging.ERROR, logger="kafka"),
        pytest.raises(kafka.errors.KafkaTimeoutError) as raised,
    ):
        client(bootstrap_timeout_ms=REFUSED_WITHIN_MS, **conf)
    return raised.value, "\n".join(r.getMessage() for r in caplog.records)


def _without_source(text: str) -> str:
    """librdkafka sometimes names OpenSSL's source place before its error (on the first
    failure, ``ssl/statem/statem_clnt.c:2124:tls_post_process_server_certificate ``)."""
    return re.sub(r"\S+\.c:\d+:\w+ (?=error:)", "", text)


# librdkafka reports a certificate it cannot verify in either of two ways, at random
VERIFY_FAILED = [
    (
        "_SSL",
        "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: "
        "broker certificate could not be verified, verify that ssl.ca.location is "
        "correctly configured or root CA certificates are installed (install "
        "ca-certificates package) (after ",
    ),
    ("_TRANSPORT", "error:0A000086:SSL routines::certificate verify failed (after "),
]

REFUSALS = {
    # setup, [(confluent's code, its message's start)...], kafka-python's logged reason
    "wrong-password-PLAIN": (
        Setup(mechanism="PLAIN", password="wrong"),
        [("_AUTHENTICATION", "SASL authentication error: Authentication failed: Invalid "
                             "username or password (after ")],
        "[Error 58] SaslAuthenticationFailedError: SaslAuthenticationFailedError: "
        "Authentication failed: Invalid username or password",
    ),
    "wrong-password-SCRAM-SHA-256": (
        Setup(mechanism="SCRAM-SHA-256", password="wrong"),
        [("_AUTHENTICATION", "SASL authentication error: Authentication failed during "
                             "authentication due to invalid credentials with SASL mechanism "
                             "SCRAM-SHA-256 (after ")],
        "[Error 58] SaslAuthenticationFailedError: SaslAuthenticationFailedError: "
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-256",
    ),
    "wrong-password-SASL_SSL-SCRAM-SHA-512": (
        Setup(tls=True, mechanism="SCRAM-SHA-512", password="wrong"),
        [("_AUTHENTICATION", "SASL authentication error: Authentication failed during "
                             "authentication due to invalid credentials with SASL mechanism "
                             "SCRAM-SHA-512 (after ")],
        "SaslAuthenticationFailedError: Authentication failed during authentication due to "
        "invalid credentials with SASL mechanism SCRAM-SHA-512",
    ),
    "expired-token-OAUTHBEARER": (
        Setup(mechanism="OAUTHBEARER", token_lifetime_s=-60),
        [("_AUTHENTICATION", 'SASL authentication error: {"status":"invalid_token"} (after ')],
        '[Error 58] SaslAuthenticationFailedError: SaslAuthenticationFailedError: '
        '{"status":"invalid_token"}',
    ),
    "no-client-certificate": (
        Setup(tls=True, mutual=True),
        [("_TRANSPORT", "Receive failed: error:0A00045C:SSL routines::tlsv13 alert "
                        "certificate required: SSL alert number 116 (after ")],
        "KafkaConnectionError: [SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert "
        "certificate required",
    ),
    "untrusted-CA": (
        Setup(tls=True, client_ca="other_ca"),
        VERIFY_FAILED,
        "KafkaConnectionError: Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate "
        "verify failed: unable to get local issuer certificate",
    ),
    "wrong-host-name": (
        Setup(tls=True, server_cert="other-host"),
        VERIFY_FAILED,
        "KafkaConnectionError: Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate "
        "verify failed: IP address mismatch, certificate is not valid for '127.0.0.1'.",
    ),
}  # fmt: skip


def _matches(error: Any, prefix: str, expected: list[tuple[str, str]]) -> bool:
    text = _without_source(error.str())
    return any(error.name() == code and text.startswith(prefix + m) for code, m in expected)


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_look_as_each_client_shows_them(
    certs: Certs, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    setup, expected, logged = REFUSALS[case]
    with setup.stub(certs, nodes=1) as stub:
        prefix = f"{setup.protocol.lower()}://{stub.bootstrap}/bootstrap: "
        cf, kp = setup.confluent(stub.bootstrap, certs), setup.kafka_python(stub.bootstrap, certs)
        # confluent-kafka: error_cb, not fatal, not retriable; the producer keeps retrying
        (first, *_) = confluent_errors(cf)
        assert (first.fatal(), first.retriable()) == (False, False)
        assert _matches(first, prefix, expected), first.str()
        if case == "wrong-password-PLAIN":  # the consumer sees the same
            (first, *_) = confluent_errors(cf, consumer=True)
            assert _matches(first, prefix, expected), first.str()
        # kafka-python: KafkaTimeoutError from the constructor, the reason only in its log
        error, log = kafka_python_refusal(kp, caplog)
        assert str(error) == f"KafkaTimeoutError: Unable to bootstrap from {stub.bootstrap}"
        assert logged in log, log
        if case == "wrong-password-PLAIN":
            error, log = kafka_python_refusal(kp, caplog, consumer=True)
            assert str(error) == f"KafkaTimeoutError: Unable to bootstrap from {stub.bootstrap}"
            assert logged in log, log
            # given api_version, the constructor does not bootstrap: send() times out
            producer = kafka.KafkaProducer(api_version=(2, 6), max_block_ms=REFUSED_WITHIN_MS,
                                           **kp)  # fmt: skip
            with pytest.raises(kafka.errors.KafkaTimeoutError) as raised:
                producer.send("refused", b"v")
            producer.close(1)
            assert (
                str(raised.value) == "KafkaTimeoutError: Failed to update metadata after 1.5 secs."
            )
        events = stub.auth_events()
    if setup.mechanism is not None:
        assert events.get("failed", 0) >= 2 and "authenticated" not in events, events


# ----------------------------------------------------------------------------- KIP-368


def test_both_clients_reauthenticate_before_their_session_expires(certs: Certs) -> None:
    setup = Setup(mechanism="SCRAM-SHA-256", session_lifetime_ms=1500)
    topic = unique_topic("reauth")
    with setup.stub(certs, nodes=1) as stub:
        cf = confluent_kafka.Producer({**setup.confluent(stub.bootstrap, certs), "linger.ms": 0})
        kp = kafka.KafkaProducer(**setup.kafka_python(stub.bootstrap, certs))
        reports: list[Any] = []
        try:
            for round_ in range(2):  # the second round is after the first session expired
                cf.produce(topic, b"cf-%d" % round_, on_delivery=lambda e, m: reports.append(e))
                assert cf.flush(10) == 0
                kp.send(topic, b"kp-%d" % round_).get(10)
                if round_ == 0:
                    time.sleep(2.5)
        finally:
            kp.close(5)
        assert reports == [None, None]
        events = stub.auth_events()
    assert events["reauthenticated"] >= 2, events  # at least once by each client
    assert "failed" not in events, events


def _port(stub: BrokerStub) -> int:
    return stub.ports[stub.cluster.node_ids[0]]


def _authenticate(client: WireClient, mechanism: str, password: str) -> SaslAuthenticateResponse:
    """A SASL exchange with our own sans-IO clients (SaslHandshake v1, SaslAuthenticate v1)."""
    shake = client.request(SaslHandshakeRequest(mechanism), 1, SaslHandshakeResponse)
    assert shake.error_code == 0, shake
    sasl = (PlainClient("alice", password) if mechanism == "PLAIN"
            else ScramClient(mechanism, "alice", password))  # fmt: skip
    message: bytes | None = sasl.first()
    while message is not None:
        answer = client.request(SaslAuthenticateRequest(message), 1, SaslAuthenticateResponse)
        if answer.error_code:
            return answer
        message = sasl.respond(answer.auth_bytes)
    assert sasl.done
    return answer


def _metadata(client: WireClient) -> MetadataResponse:
    return client.request(MetadataRequest(topics=None), 9, MetadataResponse)


def test_an_expired_session_is_closed_unless_reauthenticated() -> None:
    sasl = SaslConfig.make(["PLAIN", "SCRAM-SHA-256"], USERS, session_lifetime_ms=300)
    with BrokerStub(nodes=1, sasl=sasl) as stub:
        port = _port(stub)
        with WireClient("127.0.0.1", port) as client:  # a client that never re-authenticates
            answer = _authenticate(client, "PLAIN", USERS["alice"])
            assert (answer.error_code, answer.session_lifetime_ms) == (0, 300)
            _metadata(client)
            time.sleep(0.4)
            with pytest.raises(ConnectionError):
                _metadata(client)
        with WireClient("127.0.0.1", port) as client:  # one that does, after expiry (allowed)
            _authenticate(client, "SCRAM-SHA-256", USERS["alice"])
            time.sleep(0.4)
            assert _authenticate(client, "SCRAM-SHA-256", USERS["alice"]).error_code == 0
            _metadata(client)
        with WireClient("127.0.0.1", port) as client:  # re-authentication keeps the mechanism
            _authenticate(client, "PLAIN", USERS["alice"])
            answer = _authenticate(client, "SCRAM-SHA-256", USERS["alice"])
            assert (answer.error_code, answer.error_message) == (58, (
                "SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for "
                "re-authentication of mechanism 'PLAIN'"
            ))  # fmt: skip
            with pytest.raises(ConnectionError):
                _metadata(client)
        with WireClient("127.0.0.1", port) as client:  # ... and the principal
            _authenticate(client, "PLAIN", USERS["alice"])
            shake = client.request(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse)
            assert shake.error_code == 0
            answer = client.request(
                SaslAuthenticateRequest(PlainClient("bob", USERS["bob"]).first()), 1,
                SaslAuthenticateResponse,
            )  # fmt: skip
            assert (answer.error_code, answer.error_message) == (
                58, "Cannot change principals during re-authentication from User.alice: User.bob"
            )  # fmt: skip
        events = stub.auth_events()
    assert events == {"authenticated": 4, "reauthenticated": 1, "expired": 1, "failed": 2}


# ----------------------------------------------------------------------------- the wire


@pytest.fixture
def sasl_stub() -> Iterator[BrokerStub]:
    sasl = SaslConfig.make(["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"], USERS)
    with BrokerStub(nodes=1, sasl=sasl) as stub:
        yield stub


def _client(stub: BrokerStub) -> WireClient:
    return WireClient("127.0.0.1", _port(stub), timeout=5)


def test_the_sasl_apis_are_advertised_on_every_listener(sasl_stub: BrokerStub) -> None:
    with BrokerStub(nodes=1) as plain:
        for stub in (sasl_stub, plain):
            with _client(stub) as client:
                assert client.broker_versions[17] == (0, 1)
                assert client.broker_versions[36] == (0, 2)


def test_only_apiversions_and_sasl_are_served_before_authentication(
    sasl_stub: BrokerStub,
) -> None:
    with _client(sasl_stub) as client, pytest.raises(ConnectionError):
        _metadata(client)  # Kafka closes the connection
    with _client(sasl_stub) as client:
        shake = client.request(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse)
        assert shake.error_code == 0
        with pytest.raises(ConnectionError):
            client.request(ApiVersionsRequest(), 0, ApiVersionsResponse)  # mid-exchange


def test_out_of_order_and_unknown_mechanisms_are_refused(sasl_stub: BrokerStub) -> None:
    with _client(sasl_stub) as client:  # SaslAuthenticate before SaslHandshake
        answer = client.request(SaslAuthenticateRequest(b"\0alice\0x"), 1,
                                SaslAuthenticateResponse)  # fmt: skip
        assert (answer.error_code, answer.error_message) == (
            34, "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake."
        )  # fmt: skip
        with pytest.raises(ConnectionError):
            _metadata(client)
    for version in (0, 1):
        with _client(sasl_stub) as client:
            shake = client.request(SaslHandshakeRequest("GSSAPI"), version, SaslHandshakeResponse)
            assert (shake.error_code, shake.mechanisms) == (
                33, ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER")
            )  # fmt: skip
            with pytest.raises(ConnectionError):
                client.request(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse)
    with _client(sasl_stub) as client:  # a second SaslHandshake in the middle of an exchange
        client.request(SaslHandshakeRequest("SCRAM-SHA-512"), 1, SaslHandshakeResponse)
        shake = client.request(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse)
        assert shake.error_code == 34
        with pytest.raises(ConnectionError):
            _metadata(client)
    with _client(sasl_stub) as client:  # SASL again after success (v0: no re-authentication)
        client.request(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse)
        ok = client.request(SaslAuthenticateRequest(b"\0alice\0alice-secret"), 0,
                            SaslAuthenticateResponse)  # fmt: skip
        assert ok.error_code == 0
        again = client.request(SaslAuthenticateRequest(b"x"), 0, SaslAuthenticateResponse)
        assert (again.error_code, again.error_message) == (
            34, "SaslAuthenticate request received after successful authentication"
        )  # fmt: skip
        shake = client.request(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse)
        assert shake.error_code == 34
        _metadata(client)  # Kafka answers those and keeps the connection


def test_saslhandshake_v0_is_answered_but_unframed_tokens_are_not_served(
    sasl_stub: BrokerStub,
) -> None:
    """Neither kafka-python nor librdkafka sends SaslHandshake v0 to a broker that offers v1."""
    with _client(sasl_stub) as client:
        shake = client.request(SaslHandshakeRequest("PLAIN"), 0, SaslHandshakeResponse)
        assert (shake.error_code, shake.mechanisms) == (0, ("PLAIN", "SCRAM-SHA-512",
                                                           "OAUTHBEARER"))  # fmt: skip
        with pytest.raises(ConnectionError):
            client.request(SaslAuthenticateRequest(b"\0alice\0alice-secret"), 0,
                           SaslAuthenticateResponse)  # fmt: skip


def test_a_listener_without_sasl_answers_illegal_sasl_state() -> None:
    with BrokerStub(nodes=1) as stub, _client(stub) as client:
        shake = client.request(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse)
        assert (shake.error_code, shake.mechanisms) == (34, ())
        _metadata(client)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0nobody\0x", "Authentication failed: Invalid username or password"),
        (b"\0\0x", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"bob\0alice\0alice-secret", "Authentication failed: Client requested an "
                                      "authorization id that is different from username"),
        (b"alice-secret", "Authentication failed during authentication due to invalid "
                          "credentials with SASL mechanism PLAIN"),
    ],
)  # fmt: skip
def test_plain_refusals_carry_kafkas_messages(
    sasl_stub: BrokerStub, message: bytes, error: str
) -> None:
    with _client(sasl_stub) as client:
        client.request(SaslHandshakeRequest("PLAIN"), 1, SaslHandshakeResponse)
        answer = client.request(SaslAuthenticateRequest(message), 2, SaslAuthenticateResponse)
        assert (answer.error_code, answer.error_message) == (58, error)
        with pytest.raises(ConnectionError):
            _metadata(client)


def test_scram_and_oauthbearer_on_the_wire(sasl_stub: BrokerStub) -> None:
    with _client(sasl_stub) as client:  # the server's final message proves it (ScramClient)
        assert _authenticate(client, "SCRAM-SHA-512", USERS["alice"]).error_code == 0
        _metadata(client)
    with _client(sasl_stub) as client:  # an unknown user fails at the first message
        client.request(SaslHandshakeRequest("SCRAM-SHA-512"), 1, SaslHandshakeResponse)
        first = ScramClient("SCRAM-SHA-512", "nobody", "x").first()
        answer = client.request(SaslAuthenticateRequest(first), 2, SaslAuthenticateResponse)
        assert (answer.error_code, answer.error_message) == (58, (
            "Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-512"
        ))  # fmt: skip
    for token, lifetime in ((unsecured_jwt("alice", 60), range(55_000, 60_001)),
                            (unsecured_jwt("alice", -1), None),
                            ("not-a-jwt", None)):  # fmt: skip
        with _client(sasl_stub) as client:
            client.request(SaslHandshakeRequest("OAUTHBEARER"), 1, SaslHandshakeResponse)
            initial = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
            answer = client.request(SaslAuthenticateRequest(initial), 1, SaslAuthenticateResponse)
            assert answer.error_code == 0
            if lifetime is not None:  # the session lasts as long as the token
                assert answer.auth_bytes == b"" and answer.session_lifetime_ms in lifetime
                _metadata(client)
                continue
            assert answer.auth_bytes == b'{"status":"invalid_token"}'  # RFC 7628
            answer = client.request(SaslAuthenticateRequest(b"\x01"), 1,
                                    SaslAuthenticateResponse)  # fmt: skip
            assert (answer.error_code, answer.error_message) == (58, '{"status":"invalid_token"}')


# ----------------------------------------------------------------------------- the command line


def test_the_command_line_serves_sasl_ssl(certs: Certs, tmp_path: Path) -> None:
    cert, key = certs.server
    users = tmp_path / "users"  # bob's password stays off the command line
    users.write_text("bob:b:c\n")
    users.chmod(0o600)
    proc = subprocess.Popen(
        [sys.executable, "-m", "shmkafka.broker_stub", "--port", "0", "--partitions", "2",
         "--tls-cert", cert, "--tls-key", key, "--tls-ca", certs.ca, "--tls-require-client-cert",
         "--sasl-mechanisms", "PLAIN,SCRAM-SHA-512", "--user", "alice:alice-secret",
         "--users-file", str(users), "--sasl-session-lifetime-ms", "60000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"at (127\.0\.0\.1:\d+); control port \d+; SASL_SSL "
                          r"\(PLAIN,SCRAM-SHA-512\)$", line.strip())  # fmt: skip
        assert found, line + (proc.stdout.read() if proc.poll() is not None else "")
        setup = Setup(tls=True, client_cert=True, mechanism="SCRAM-SHA-512")
        bootstrap, topic = found.group(1), unique_topic("cli")
        confluent_produce(setup.confluent(bootstrap, certs), topic)
        kp_conf = {**setup.kafka_python(bootstrap, certs), "sasl_plain_username": "bob",
                   "sasl_plain_password": "b:c"}  # fmt: skip
        kafka_python_produce(kp_conf, topic)
        values = kafka_python_read(kp_conf, topic, 2 * COUNT)
        assert sorted(values) == expected_values()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "broker_stub: stopped" in out, out


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--tls-ca", "ca.pem"], "--tls-ca and --tls-require-client-cert need --tls-cert"),
        (["--tls-cert", "c", "--tls-key", "k", "--tls-require-client-cert"],
         "--tls-require-client-cert needs --tls-ca"),
        (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"],
         "No such file or directory"),
        (["--user", "alice:x"], "--user, --users-file and --sasl-session-lifetime-ms need"),
        (["--advertise-ports", "1,2"], "--advertise-ports: 2 ports for 1 node(s)"),
        (["--sasl-mechanisms", "PLAIN"], "PLAIN and SCRAM need at least one --user"),
        (["--sasl-mechanisms", "PLAIN", "--user", "alice"], "expected NAME:PASSWORD"),
        (["--sasl-mechanisms", "GSSAPI", "--user", "a:b"], "each must be one of"),
    ],
)  # fmt: skip
def test_the_command_line_refuses_incomplete_security_settings(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(build_parser().parse_args(["--port", "0", *argv])) == 2
    assert error in capsys.readouterr().err


def test_oauthbearer_needs_no_user() -> None:
    args = build_parser().parse_args(["--sasl-mechanisms", "oauthbearer"])
    assert security(args) == (None, SaslConfig(("OAUTHBEARER",)))
