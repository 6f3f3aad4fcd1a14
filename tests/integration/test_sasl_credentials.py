"""confluent-kafka's ``set_sasl_credentials`` and what a producer does with records queued
while its login is refused, each run side by side with confluent-kafka itself on
broker_stub's SASL listener: librdkafka keeps such records until ``message.timeout.ms`` (its
``error_cb`` hears of each refusal), and the next authentication uses credentials set
meanwhile, so they are delivered. Also: a password rotated on the broker and in the
producer, then a forced reconnect, for PLAIN and SCRAM: every record read back once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest

from shmkafka import Producer
from shmkafka.broker_stub.auth import SaslConfig
from shmkafka.confluent_kafka import KafkaError
from shmkafka.protocol.messages.produce import ProduceRequest
from tests.security import USERS, Setup, confluent_read

pytestmark = pytest.mark.usefixtures("pool_removed")

RECORDS = 500
BOUND_S = 45.0  # the flush the user's steps gave (a test's wait always has a bound)


def _peer(conf: dict[str, Any], pool: str) -> Any:
    return confluent_kafka.Producer(conf)


def _ours(conf: dict[str, Any], pool: str) -> Any:
    return Producer({**conf, "shmkafka.pool": pool})


PRODUCERS = [pytest.param(_peer, id="confluent-kafka"), pytest.param(_ours, id="shmkafka")]
Make = Callable[[dict[str, Any], str], Any]


def _until(condition: Callable[[], bool], producer: Any, what: str, bound: float) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, f"not within {bound} s: {what}"
        producer.poll(0.05)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
@pytest.mark.parametrize("make", PRODUCERS)
def test_records_queued_while_the_login_is_refused_wait_for_message_timeout(
    make: Make, mechanism: str, pool_name: str
) -> None:
    setup = Setup(mechanism=mechanism, password="wrong")
    with setup.stub(None) as stub:  # type: ignore[arg-type]
        conf = setup.confluent(stub.bootstrap, None)  # type: ignore[arg-type]
        errors: list[int] = []
        reports: list[tuple[float, int | None]] = []
        producer = make(
            {**conf, "message.timeout.ms": 3000, "error_cb": lambda e: errors.append(e.code())},
            pool_name,
        )
        started = time.monotonic()
        producer.produce(
            "refused",
            b"x",
            on_delivery=lambda e, m: reports.append(
                (time.monotonic() - started, None if e is None else e.code())
            ),
        )
        _until(lambda: bool(reports), producer, "the record's report", 20)
        producer.flush(5)
        assert "refused" not in stub.cluster.topics  # nothing written
    # the record waited its message.timeout.ms, and error_cb heard of the refusals meanwhile
    ((took, code),) = reports
    assert code == KafkaError._MSG_TIMED_OUT
    assert 2.9 <= took < 10, took
    assert KafkaError._AUTHENTICATION in errors


@pytest.mark.parametrize("make", PRODUCERS)
def test_set_sasl_credentials_lets_the_queued_records_through(make: Make, pool_name: str) -> None:
    """A new user's steps: a Producer started with a wrong password got its authentication
    error, called set_sasl_credentials with the right one, and produced 499 more records:
    all 500 are delivered, the one produced before the fix included."""
    setup = Setup(mechanism="PLAIN", password="wrong")
    with setup.stub(None) as stub:  # type: ignore[arg-type]
        conf = setup.confluent(stub.bootstrap, None)  # type: ignore[arg-type]
        errors: list[int] = []
        reports: list[int | None] = []
        producer = make({**conf, "error_cb": lambda e: errors.append(e.code())}, pool_name)

        def report(error: Any, _message: Any) -> None:
            reports.append(None if error is None else error.code())

        producer.produce("rotated", b"v0", on_delivery=report)
        _until(lambda: KafkaError._AUTHENTICATION in errors, producer, "the refusal", 20)
        producer.set_sasl_credentials("alice", USERS["alice"])
        for i in range(1, RECORDS):
            producer.produce("rotated", b"v%d" % i, on_delivery=report)
        assert producer.flush(BOUND_S) == 0
        assert reports == [None] * RECORDS
        reader = Setup(mechanism="PLAIN").confluent(stub.bootstrap, None)  # type: ignore[arg-type]
        values = confluent_read(reader, "rotated", RECORDS)
    assert sorted(values) == sorted(b"v%d" % i for i in range(RECORDS))  # each exactly once


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_password_rotated_on_the_broker_and_in_the_producer(
    mechanism: str, pool_name: str
) -> None:
    """Rotate alice's password on the broker and in the producer, force every connection
    to reconnect (the next Produce request is dropped on each node): the reconnects log in
    with the new password, and every record is delivered and read back once."""
    setup = Setup(mechanism=mechanism)
    rotated = "alice-rotated-secret"
    with setup.stub(None) as stub:  # type: ignore[arg-type]
        conf = setup.confluent(stub.bootstrap, None)  # type: ignore[arg-type]
        conf.pop("log_level")
        reports: list[int | None] = []

        def report(error: Any, _message: Any) -> None:
            reports.append(None if error is None else error.code())

        producer = Producer({**conf, "shmkafka.pool": pool_name, "enable.idempotence": True})
        for i in range(RECORDS // 2):
            producer.produce("rotation", b"v%d" % i, key=b"k%d" % i, on_delivery=report)
        assert producer.flush(BOUND_S) == 0
        stub.sasl = SaslConfig.make([mechanism], {"alice": rotated})
        producer.set_sasl_credentials("alice", rotated)
        stub.faults.drop_connection("before", count=2, api_key=ProduceRequest.API_KEY)
        for i in range(RECORDS // 2, RECORDS):
            producer.produce("rotation", b"v%d" % i, key=b"k%d" % i, on_delivery=report)
        assert producer.flush(BOUND_S) == 0
        producer.close()
        assert reports == [None] * RECORDS
        assert not stub.faults.drops or all(r.remaining == 0 for r in stub.faults.drops)
        reader = {**setup.confluent(stub.bootstrap, None), "sasl.password": rotated}  # type: ignore[arg-type]
        values = confluent_read(reader, "rotation", RECORDS)
    assert sorted(values) == sorted(b"v%d" % i for i in range(RECORDS))  # each exactly once


def test_credentials_too_long_for_the_board_are_refused(pool_name: str) -> None:
    setup = Setup(mechanism="PLAIN")
    with setup.stub(None) as stub:  # type: ignore[arg-type]
        conf = setup.confluent(stub.bootstrap, None)  # type: ignore[arg-type]
        producer = Producer({**conf, "shmkafka.pool": pool_name})
        with pytest.raises(confluent_kafka.KafkaException) as raised:
            producer.set_sasl_credentials("alice", "x" * 4096)
        assert raised.value.args[0].code() == KafkaError._INVALID_ARG
        assert "x" * 16 not in str(raised.value)  # never the secret
        with pytest.raises(TypeError):
            producer.set_sasl_credentials("alice", None)  # type: ignore[arg-type]
        producer.close()
