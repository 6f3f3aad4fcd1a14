from __future__ import annotations

from shmkafka.otel import semconv
from shmkafka.otel.semconv import Names, Producer

PRODUCER = Producer("app-1", ("broker-a", 9093), "cluster-x")


def test_the_opt_in_chooses_the_names() -> None:
    assert semconv.names_chosen({}) is Names.OLD
    assert semconv.names_chosen({"OTEL_SEMCONV_STABILITY_OPT_IN": "http"}) is Names.OLD
    assert semconv.names_chosen({"OTEL_SEMCONV_STABILITY_OPT_IN": "http, messaging"}) is Names.NEW
    both = {"OTEL_SEMCONV_STABILITY_OPT_IN": "messaging,messaging/dup"}
    assert semconv.names_chosen(both) is Names.BOTH  # (dup wins)


def test_old_and_new_send_attributes() -> None:
    old = semconv.send_attributes(Names.OLD, "t", b"k", 5, PRODUCER)
    new = semconv.send_attributes(Names.NEW, "t", b"k", 5, PRODUCER)
    common = {
        "messaging.system": "kafka", "messaging.destination.name": "t",
        "messaging.kafka.message.key": "k", "server.address": "broker-a", "server.port": 9093,
        "messaging.kafka.cluster.id": "cluster-x",
    }  # fmt: skip
    assert old == {**common, "messaging.operation": "publish", "messaging.client_id": "app-1",
                   "messaging.message.payload_size_bytes": 5}  # fmt: skip
    assert new == {**common, "messaging.operation.name": "send",
                   "messaging.operation.type": "send", "messaging.client.id": "app-1",
                   "messaging.message.body.size": 5}  # fmt: skip
    both = semconv.send_attributes(Names.BOTH, "t", b"k", 5, PRODUCER)
    assert both == {**old, **new}


def test_a_key_without_a_text_form_is_left_out() -> None:
    assert semconv.key_text("s") == "s" and semconv.key_text(b"\xc3\xa9") == "é"
    assert semconv.key_text(b"\xff\xfe") is None and semconv.key_text(None) is None
    attributes = semconv.send_attributes(Names.NEW, "t", b"\xff", None, Producer(None, None))
    assert "messaging.kafka.message.key" not in attributes
    assert "messaging.message.body.size" not in attributes


def test_delivery_attributes_carry_partition_and_offset() -> None:
    assert semconv.delivery_attributes(Names.OLD, 3, 42) == {
        "messaging.kafka.destination.partition": 3, "messaging.kafka.message.offset": 42,
    }  # fmt: skip
    assert semconv.delivery_attributes(Names.NEW, 3, 42) == {
        "messaging.destination.partition.id": "3", "messaging.kafka.offset": 42,
    }  # fmt: skip
    assert semconv.delivery_attributes(Names.NEW, None, -1) == {}  # acks=0: no offset
