"""The peers' exception and value types: with kafka-python installed our errors are
instances of its classes; confluent-kafka's own KafkaError/KafkaException/Message are the
confluent API's; without the peers the same names exist, pure Python, behaving alike
(compared here with the peers themselves, side by side)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import confluent_kafka
import kafka.errors
import pytest

import shmkafka.confluent_kafka as shm_confluent
import shmkafka.kafka.errors as shm_errors
from shmkafka.facades.confluent import pure as confluent_pure
from shmkafka.facades.confluent.librdkafka_errors import ERRORS


def test_every_kafka_python_error_name_exists() -> None:
    names = [n for n in dir(kafka.errors) if not n.startswith("_") and n not in ("inspect", "sys")]
    assert [n for n in names if not hasattr(shm_errors, n)] == []
    for code, peer in kafka.errors.kafka_errors.items():
        if code is not None:
            assert shm_errors.kafka_errors[code].__name__ == peer.__name__, code


@pytest.mark.parametrize(
    "name",
    ["KafkaTimeoutError", "KafkaConfigurationError", "IllegalStateError", "NodeNotReadyError",
     "MessageSizeTooLargeError", "NotLeaderForPartitionError", "TopicAuthorizationFailedError",
     "UnknownError", "KafkaError", "StaleMetadata"],
)  # fmt: skip
def test_our_errors_are_caught_as_kafka_pythons(name: str) -> None:
    ours = getattr(shm_errors, name)("detail")
    peer_class = getattr(kafka.errors, name)
    assert isinstance(ours, peer_class) and isinstance(ours, getattr(shm_errors, name))
    assert type(ours).__name__ == name
    try:
        raise ours
    except peer_class as caught:  # an app's existing except clause
        assert caught is ours
    assert str(ours) == str(peer_class("detail"))  # kafka-python's str(), exactly
    assert ours.retriable == peer_class.retriable or name == "CorruptRecordError"


def test_broker_errors_match_kafka_python_by_code() -> None:
    too_large = shm_errors.for_code(10)("2000 bytes")
    assert isinstance(too_large, kafka.errors.MessageSizeTooLargeError)
    assert (
        too_large.errno == 10
        and str(too_large) == "[Error 10] MessageSizeTooLargeError: 2000 bytes"
    )
    assert isinstance(shm_errors.MemoryExhaustedError("full"), kafka.errors.KafkaTimeoutError)
    assert isinstance(shm_errors.TopicAuthorizationFailedError(), kafka.errors.AuthorizationError)


def test_twins_pickle_and_hash() -> None:
    error = shm_errors.KafkaTimeoutError("late")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and again.args == ("late",)
    assert isinstance(again, kafka.errors.KafkaTimeoutError)
    assert hash(error) != hash(again) or error is again  # hashable, as exceptions are


def test_the_kafka_mirrors_submodules_are_shmkafkas() -> None:
    import shmkafka.kafka as mirror

    assert mirror.errors is shm_errors and mirror.errors.KafkaTimeoutError is not None
    assert mirror.producer.KafkaProducer is mirror.KafkaProducer
    assert mirror.KafkaConsumer is kafka.KafkaConsumer  # not ours: passed through


def test_confluent_types_are_confluent_kafkas_own() -> None:
    for name in ("KafkaError", "KafkaException", "Message", "TopicPartition"):
        assert getattr(shm_confluent, name) is getattr(confluent_kafka, name)
    assert shm_confluent.Consumer is confluent_kafka.Consumer  # passed through


@pytest.mark.parametrize(("code", "name", "text"), ERRORS)
def test_pure_kafka_error_behaves_as_confluent_kafkas(code: int, name: str, text: str) -> None:
    for args in ((code,), (code, "why"), (code, None, True, True, True)):
        pure, peer = confluent_pure.KafkaError(*args), confluent_kafka.KafkaError(*args)
        assert (pure.code(), pure.name(), pure.str(), pure.fatal(), pure.retriable()) == (
            peer.code(),
            peer.name(),
            peer.str(),
            peer.fatal(),
            peer.retriable(),
        )
        assert pure.txn_requires_abort() == peer.txn_requires_abort()
        if not peer.fatal():  # (the fatal repr's prefix is librdkafka's; no producer sets it)
            assert str(pure) == str(peer) and repr(pure) == repr(peer)
    assert (
        getattr(confluent_pure.KafkaError, name)
        == code
        == getattr(confluent_kafka.KafkaError, name)
    )
    assert (
        confluent_pure.KafkaError(code) == code and confluent_pure.KafkaError(code) != code + 1000
    )
    with pytest.raises(TypeError):
        _ = confluent_pure.KafkaError(code) == "x"


def test_pure_message_and_topic_partition_behave_as_confluent_kafkas() -> None:
    fields = ("t", 3, 17, b"k", b"v", [("h", b"1")], None, (1, 1234), 0.5)
    pure, peer = confluent_pure.Message(*fields), confluent_kafka.Message(*fields)
    for accessor in ("topic", "partition", "offset", "key", "value", "headers", "error",
                     "timestamp", "latency", "leader_epoch"):  # fmt: skip
        assert getattr(pure, accessor)() == getattr(peer, accessor)(), accessor
    assert len(pure) == len(peer)
    empty, peer_empty = confluent_pure.Message(), confluent_kafka.Message()
    assert (empty.partition(), empty.offset(), empty.timestamp()) == (
        peer_empty.partition(),
        peer_empty.offset(),
        peer_empty.timestamp(),
    )
    tp, peer_tp = confluent_pure.TopicPartition("t", 1), confluent_kafka.TopicPartition("t", 1)
    assert repr(tp) == repr(peer_tp) and tp == confluent_pure.TopicPartition("t", 1)
    assert (tp.topic, tp.partition, tp.offset) == (peer_tp.topic, peer_tp.partition, peer_tp.offset)


def test_without_the_peers_the_same_names_exist() -> None:
    script = textwrap.dedent("""
        import sys
        sys.modules["kafka"] = None  # neither peer can be imported
        sys.modules["confluent_kafka"] = None
        from shmkafka.kafka import KafkaProducer
        from shmkafka.kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, for_code
        from shmkafka.confluent_kafka import KafkaError, KafkaException, Message, Producer
        from shmkafka.facades.confluent import pure as confluent_pure
        assert KafkaError is confluent_pure.KafkaError
        assert KafkaError(-192).name() == "_MSG_TIMED_OUT" and KafkaError._TRANSPORT == -195
        error = MessageSizeTooLargeError("big")
        assert type(error).__name__ == "MessageSizeTooLargeError" and for_code(10) is type(error)
        assert str(error) == "[Error 10] MessageSizeTooLargeError: big"
        try:
            raise KafkaException(KafkaError(-186, "bad"))
        except KafkaException as caught:
            assert caught.args[0].str() == "bad"
        try:
            Producer({"linger.ms": "soon"})
        except KafkaException as caught:
            assert caught.args[0].code() == KafkaError._INVALID_ARG
        print("ok")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "ok", done.stderr
