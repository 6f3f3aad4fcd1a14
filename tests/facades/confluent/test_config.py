"""The confluent API's configuration, side by side with confluent-kafka itself: for each
configuration both construct, or both raise the same exception type with the same librdkafka
error code and text. No ``bootstrap.servers`` is given (librdkafka constructs without one,
and so do we, without a pool), so nothing here reaches a broker or shared memory."""

from __future__ import annotations

import os
from typing import Any

import confluent_kafka
import pytest

from shmkafka import Producer
from shmkafka.confluent_kafka import KafkaError, KafkaException
from shmkafka.facades.confluent.config import parse, pool_settings


def _outcome(make: Any, conf: Any) -> tuple[str, Any, str]:
    try:
        producer = make(conf)
    except KafkaException as exc:
        error = exc.args[0]
        return ("KafkaException", error.code(), error.str())
    except (TypeError, ValueError, AttributeError) as exc:
        return (type(exc).__name__, None, str(exc))
    if hasattr(producer, "close"):
        producer.close(0)
    return ("constructed", None, "")


CONFIGURATIONS = [
    # values librdkafka accepts that Java's rules (or ours before) refused
    {"message.timeout.ms": 5000},
    {"message.timeout.ms": 30000},
    {"message.timeout.ms": 0},
    {"message.timeout.ms": 1},
    {"message.timeout.ms": 1000, "linger.ms": 500},
    {"request.timeout.ms": 60000, "message.timeout.ms": 5000},
    {"linger.ms": 0.5},
    {"linger.ms": "2.5"},
    {"batch.size": "0x4000"},
    {"retry.backoff.ms": 1000, "retry.backoff.max.ms": 500},
    {"enable.idempotence": "t"},
    {"acks": "all"},
    {"acks": "ALL"},
    {"compression.codec": "GZIP"},
    {"compression.type": "zstd", "compression.level": 12},
    {"client.id": 5},
    {"default.topic.config": {"acks": 1, "message.timeout.ms": 5000}},
    {"topic.acks": 1},
    {"group.id": "consumers-only"},
    {"debug": "all", "socket.keepalive.enable": True, "batch.num.messages": 100},
    {"error_cb": print, "stats_cb": print, "statistics.interval.ms": 1000},
    {"delivery.report.only.error": True},
    {"enable.idempotence": True, "max.in.flight": 3},
    {"bootstrap.servers": None},
    # what librdkafka refuses, with its words
    {"lingr.ms": 5},
    {"topic.nonsense": 1},
    {"linger.ms": "soon"},
    {"linger.ms": 900001},
    {"batch.size": 0},
    {"batch.size": ""},
    {"enable.idempotence": "maybe"},
    {"enable.idempotence": ""},
    {"compression.codec": "brotli"},
    {"partitioner": "crc"},
    {"message.timeout.ms": 100, "linger.ms": 200},
    {"enable.idempotence": True, "acks": 1},
    {"enable.idempotence": True, "max.in.flight": 6},
    {"enable.idempotence": True, "retries": 0},
    {"enable.gapless.guarantee": True},
    {"reconnect.backoff.ms": 500, "reconnect.backoff.max.ms": 100},
    {"dr_msg_cb": print},
    {"ssl.truststore.location": "/x"},
    {"on_delivery": 3},
    {"error_cb": 3},
    {"error_cb": None},
    {"throttle_cb": 3},
    {"delivery.report.only.error": "true"},
    {"default.topic.config": 5},
]


def _default_pools() -> set[str]:
    """The pools of /dev/shm with a default name (the tests running beside this one name
    theirs after their process: ``shmkafka.t<pid>x...``)."""
    return {n for n in os.listdir("/dev/shm") if n.startswith("shmkafka.p")}


@pytest.mark.parametrize("conf", CONFIGURATIONS, ids=lambda conf: ",".join(map(str, conf)))
def test_configuration_outcome_is_confluent_kafkas(conf: dict[str, Any]) -> None:
    before = _default_pools()
    assert _outcome(Producer, conf) == _outcome(confluent_kafka.Producer, conf)
    assert _default_pools() <= before


@pytest.mark.parametrize(
    "args", [(), (None,), ([],), ({}, {})], ids=["nothing", "None", "list", "two dicts"]
)
def test_constructor_arguments_as_confluent_kafka(args: tuple[Any, ...]) -> None:
    mine = _outcome(lambda a: Producer(*a), args)
    assert mine == _outcome(lambda a: confluent_kafka.Producer(*a), args)
    assert mine[0] == "TypeError"


def test_keyword_arguments_override_the_dict() -> None:
    settings, _, _ = parse({"linger.ms": 5, **{"linger.ms": 7}})
    assert settings["linger_ms"] == 7
    producer = Producer({"linger.ms": 5}, **{"client.id": "kw"})
    assert producer._settings["client_id"] == "kw"
    producer.close(0)


def test_properties_map_onto_settings() -> None:
    settings, ignored, warnings = parse({
        "bootstrap.servers": "a:1", "queue.buffering.max.ms": "7", "compression.codec": "lz4",
        "message.timeout.ms": 0, "enable.idempotence": "true",
        "queue.buffering.max.kbytes": 1024, "socket.keepalive.enable": True, "debug": "all",
        "group.id": "g",
    })  # fmt: skip
    assert settings["linger_ms"] == 7 and settings["compression_type"] == "lz4"
    assert settings["delivery_timeout_ms"] == 2**31 - 1  # 0: no limit
    assert settings["buffer_kbytes"] == 1024
    assert settings["enable_idempotence"] and settings["acks"] == -1  # idempotence forces all
    assert settings["partitioner"] == "consistent_random"  # librdkafka's default
    assert sorted(ignored) == ["debug", "socket.keepalive.enable"]
    assert warnings == [
        "Configuration property group.id is a consumer property and will be ignored by this "
        "producer instance"
    ]


def test_batches_are_librdkafkas_by_default_and_as_given() -> None:
    defaults, _, _ = parse({})
    assert (defaults["batch_size"], defaults["batch_max_records"]) == (1_000_000, 10_000)
    given, ignored, _ = parse({"batch.size": 65536, "batch.num.messages": 100})
    assert (given["batch_size"], given["batch_max_records"]) == (65536, 100)
    assert ignored == []
    pool = pool_settings(given)
    assert (pool["batch_size"], pool["batch_max_records"]) == (65536, 100)


def test_linger_is_lowered_below_a_short_message_timeout() -> None:
    settings, _, _ = parse({"message.timeout.ms": 3})  # linger.ms not given: librdkafka lowers it
    assert settings["linger_ms"] == 2


def test_kafka_error_is_confluent_kafkas_own_class() -> None:
    assert KafkaError is confluent_kafka.KafkaError
    assert KafkaException is confluent_kafka.KafkaException
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        Producer({"linger.ms": -1})
    error = raised.value.args[0]
    assert error.code() == KafkaError._INVALID_ARG and error.name() == "_INVALID_ARG"
    assert not error.fatal() and not error.retriable()
