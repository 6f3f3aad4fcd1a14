"""The common record's send() / produce() in one C call (producer/_tracker_entry.c, _tracker.c)
against the Python path it must match (SHMKAFKA_PURE_PYTHON: no C at all), on Tansu: the
same partitions (and the peers' own partitioners' choices), every record read back exactly
once, reports and futures as before, the uncommon calls handed to Python unchanged, no
object kept for a discarded future, and a forked child on its own handle."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import zlib
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import kafka.partitioner.default
import pytest

from shmkafka.confluent_kafka import Producer
from shmkafka.facades.confluent import reports
from shmkafka.kafka import KafkaProducer
from shmkafka.producer.futures import Future
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")
PARTITIONS = 5
KEYS = [b"key-%d" % i for i in range(200)]


@pytest.fixture
def topic(tansu: Peer) -> str:
    name = unique_topic("entry")
    with cluster(tansu) as c:
        c.ensure_topic(name, PARTITIONS)
    return name


@pytest.fixture(params=["c", "python"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "python":
        monkeypatch.setenv("SHMKAFKA_PURE_PYTHON", "1")
    yield str(request.param)


def _placement(tansu: Peer, topic: str, expected: int) -> dict[bytes, set[int]]:
    seen: dict[bytes, set[int]] = {}
    messages = consume_all(tansu, topic, list(range(PARTITIONS)), expected)
    values = [m.value() for m in messages]
    assert len(values) == expected and len(set(values)) == expected, "lost or duplicated"
    for m in messages:
        seen.setdefault(m.key() or b"", set()).add(m.partition())
    return seen


def test_kafka_python_send_c_entry_and_python_path_agree(
    tansu: Peer, topic: str, pool_name: str, route: str
) -> None:
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=5)
    try:
        first = producer.send(topic, b"warm", key=KEYS[0]).get(30)
        assert producer._fast_enabled() is (route == "c")
        futures = [producer.send(topic, b"%s:%d" % (k, i), key=k) for i, k in enumerate(KEYS)]
        keyless = [producer.send(topic, b"none:%d" % i) for i in range(50)]
        results = [f.get(30) for f in futures + keyless]
    finally:
        producer.close()

    def partitioner(key: bytes) -> int:  # kafka-python's DefaultPartitioner for a key
        return (kafka.partitioner.default.murmur2(key) & 0x7FFFFFFF) % PARTITIONS

    for key, metadata in zip(KEYS, results, strict=False):
        assert metadata.partition == partitioner(key)
        assert metadata.serialized_key_size == len(key) and metadata.topic == topic
    assert len({m.partition for m in results[len(KEYS) :]}) <= 2  # sticky, moving on when full
    offsets = {(m.partition, m.offset) for m in results} | {(first.partition, first.offset)}
    assert len(offsets) == len(results) + 1
    seen = _placement(tansu, topic, len(results) + 1)
    assert all(seen[k] == {partitioner(k)} for k in KEYS)


@pytest.mark.parametrize("partitioner", ["consistent_random", "murmur2_random"])
def test_confluent_produce_places_keys_as_librdkafka_does(
    tansu: Peer, topic: str, pool_name: str, route: str, partitioner: str
) -> None:
    conf = {"bootstrap.servers": tansu.bootstrap, "linger.ms": 5, "partitioner": partitioner}
    theirs = confluent_kafka.Producer(conf)
    ours = Producer({**conf, "shmkafka.pool": pool_name})
    placed: dict[str, dict[bytes, int]] = {"theirs": {}, "ours": {}}

    def report(name: str) -> Any:
        def on_delivery(error: Any, message: Any) -> None:
            assert error is None, error
            placed[name][message.key()] = message.partition()

        return on_delivery

    try:
        ours.produce(topic, b"warm", b"warm")
        assert ours.flush(30) == 0
        assert ours._fast_enabled() is (route == "c")
        for name, producer in (("theirs", theirs), ("ours", ours)):
            for key in KEYS:
                producer.produce(topic, b"%s:%s" % (name.encode(), key), key,
                                 on_delivery=report(name))  # fmt: skip
            assert producer.flush(30) == 0
        assert len(ours) == 0
    finally:
        ours.close()
    assert placed["ours"] == placed["theirs"]
    if partitioner == "consistent_random":
        assert all(p == zlib.crc32(k) % PARTITIONS for k, p in placed["ours"].items())
    _placement(tansu, topic, 2 * len(KEYS) + 1)


def test_reports_go_to_the_callback_that_asked_and_none_is_kept_without_one(
    tansu: Peer, topic: str, pool_name: str, route: str
) -> None:
    calls: dict[str, list[bytes]] = {"configured": [], "kwarg": [], "callback": []}

    def to(name: str) -> Any:
        return lambda error, message: calls[name].append(message.value())

    producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5,
                         "on_delivery": to("configured"), "shmkafka.pool": pool_name})  # fmt: skip
    try:
        producer.produce(topic, b"warm", b"k")
        assert producer.flush(30) == 0
        producer.produce(topic, b"a", b"k")
        producer.produce(topic, value=b"b", key=b"k", on_delivery=to("kwarg"))
        producer.produce(topic, b"c", b"k", callback=to("callback"), on_delivery=to("kwarg"))
        assert producer.flush(30) == 0
    finally:
        producer.close()
    assert calls == {"configured": [b"warm", b"a"], "kwarg": [b"b"], "callback": [b"c"]}


@pytest.fixture(params=["layout", "constructor"])
def message_made(request: pytest.FixtureRequest) -> Iterator[str]:
    """The C serve's Message by confluent-kafka's layout, or by its constructor."""
    if request.param == "layout" and not reports.LAYOUT_IN_USE:
        # (another confluent-kafka's layout, or no C: this case would test the constructor;
        # test_reports fails if the layout of the one checked goes unused)
        pytest.skip("no Message layout in use")
    if request.param == "constructor" and reports.use_message_layout is not None:
        reports.use_message_layout(None, (), False, b"")
    try:
        yield str(request.param)
    finally:
        if reports.LAYOUT_IN_USE:
            assert reports.checked_layout(confluent_kafka.Message)


def test_each_report_tells_what_the_broker_wrote(
    tansu: Peer, topic: str, pool_name: str, route: str, message_made: str
) -> None:
    reported: list[Any] = []
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5,
                         "shmkafka.pool": pool_name})  # fmt: skip
    sent = [(KEYS[n % 7] if n % 3 else None, b"value-%d" % n) for n in range(60)]
    try:
        producer.produce(topic, b"warm", b"k")
        assert producer.flush(30) == 0
        for key, value in sent:
            producer.produce(topic, value, key, on_delivery=lambda e, m: reported.append((e, m)))
        assert producer.flush(30) == 0
    finally:
        producer.close()
    written = {(m.partition(), m.offset()): m for m in consume_all(tansu, topic,
               list(range(PARTITIONS)), len(sent) + 1)}  # fmt: skip
    assert sorted([(m.key(), m.value()) for _, m in reported], key=repr) == sorted(sent, key=repr)
    for error, message in reported:
        assert error is None and message.error() is None and message.headers() is None
        assert type(message) is confluent_kafka.Message and message.topic() == topic
        twin = written[(message.partition(), message.offset())]
        assert (message.key(), message.value()) == (twin.key(), twin.value())
        assert message.timestamp() == twin.timestamp()
        assert message.timestamp()[0] == confluent_kafka.TIMESTAMP_CREATE_TIME
        assert 0 <= message.latency() < 30 and message.leader_epoch() is None


def test_calls_the_c_entry_does_not_take_are_the_python_paths(
    tansu: Peer, topic: str, pool_name: str, route: str
) -> None:
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    confluent = Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name + "c"})
    try:
        producer.send(topic, b"warm", key=b"k").get(30)
        confluent.produce(topic, b"warm", b"k")
        assert confluent.flush(30) == 0
        odd = [
            producer.send(topic, b"h", key=b"k", headers=[("h", b"1")]),
            producer.send(topic, b"p", partition=3),
            producer.send(topic, value=b"t", key=b"k", timestamp_ms=1234),
            producer.send(topic, None, key=b"tombstone"),
        ]
        metadata = [f.get(30) for f in odd]
        assert metadata[1].partition == 3 and metadata[2].timestamp == 1234
        assert metadata[0].serialized_header_size == 2
        with pytest.raises(TypeError):
            producer.send(topic, b"v", nosuch=1)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            producer.send(topic, "not bytes")  # kafka-python: no serializer, str refused
        reports: list[Any] = []
        confluent.produce(topic, "text", "key", partition=2, timestamp=1234, headers={"h": b"1"},
                          on_delivery=lambda e, m: reports.append(m))  # fmt: skip
        assert confluent.flush(30) == 0
        assert [(m.value(), m.partition(), m.timestamp()[1]) for m in reports] == [
            (b"text", 2, 1234)
        ]
        with pytest.raises(TypeError, match="bytes-like"):
            confluent.produce(topic, 1234)
        with pytest.raises(TypeError):
            confluent.produce(topic, b"v", nosuch=1)  # type: ignore[call-arg]
    finally:
        producer.close()
        confluent.close()
    with pytest.raises(RuntimeError):
        confluent.produce(topic, b"v", b"k")
    with pytest.raises(kafka.errors.IllegalStateError):
        producer.send(topic, b"v", key=b"k")


def _live_futures() -> int:
    """Future objects alive (the C type is not tracked by the collector: it counts them)."""
    if Future.__module__.endswith("_tracker"):
        from shmkafka.producer._tracker import live_futures

        return live_futures()
    return sum(1 for o in gc.get_objects() if type(o) is Future)


def test_a_discarded_future_is_not_kept(
    tansu: Peer, topic: str, pool_name: str, route: str
) -> None:
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=2000)
    try:
        producer.send(topic, b"warm", key=b"k").get(30)
        before = _live_futures()
        for key in KEYS * 5:
            producer.send(topic, b"v", key=key)
        assert producer._handle.outstanding == len(KEYS) * 5  # pending, counted...
        assert _live_futures() == before  # ...but no future kept for them
        kept = producer.send(topic, b"kept", key=b"k")
        called: list[int] = []
        kept.add_callback(lambda metadata: called.append(metadata.offset))
        producer.flush(30)
        assert called == [kept.get(0).offset] and producer._handle.outstanding == 0
    finally:
        producer.close()


def test_a_forked_child_sends_through_its_own_handle(
    tansu: Peer, topic: str, pool_name: str, route: str
) -> None:
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
    producer.send(topic, b"parent", key=b"p").get(30)
    pid = os.fork()
    if pid == 0:  # the child: every outcome is its exit status
        status = 1
        try:
            fresh = not producer._fast_enabled()
            metadata = producer.send(topic, b"child", key=b"c").get(30)
            again = producer.send(topic, b"child2", key=b"c").get(30)
            enabled = producer._fast_enabled() is (route == "c")
            status = 0 if fresh and enabled and again.offset == metadata.offset + 1 else 2
            producer.close()
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        assert producer._fast_enabled() is (route == "c")  # the parent's stays on
        producer.send(topic, b"parent2", key=b"p").get(30)
    finally:
        producer.close()
    values = sorted(m.value() for m in consume_all(tansu, topic, list(range(PARTITIONS)), 4))
    assert values == [b"child", b"child2", b"parent", b"parent2"]


def test_shmkafka_pure_python_turns_off_every_c_part() -> None:
    probe = (
        "from shmkafka.pool import fastpath\n"
        "from shmkafka.producer import client, entry, futures\n"
        "from shmkafka.facades.confluent import reports\n"
        "from shmkafka.facades.kafka_python import producer as kafka_python\n"
        "from shmkafka.facades.confluent import producer as confluent\n"
        "from shmkafka.facades.aiokafka import producer as aio\n"
        "print(fastpath.FastAppend is None, client.Tracker is None,\n"
        "      entry.SendEntry is entry.PySendEntry, entry.ProduceEntry is entry.PyProduceEntry,\n"
        "      entry.AppendEntry is entry.PyAppendEntry,\n"
        "      reports.serve_reports is None, futures.Future.__module__ == futures.__name__,\n"
        "      issubclass(kafka_python.KafkaProducer, entry.PySendEntry),\n"
        "      issubclass(confluent.Producer, entry.PyProduceEntry),\n"
        "      issubclass(aio.AIOKafkaProducer, entry.PyAppendEntry))\n"
    )

    def run(pure: bool) -> str:
        env = {k: v for k, v in os.environ.items() if k != "SHMKAFKA_PURE_PYTHON"}
        if pure:
            env["SHMKAFKA_PURE_PYTHON"] = "1"
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        return out.stdout.split()

    assert run(pure=True) == ["True"] * 10
    assert run(pure=False) == ["False"] * 10  # (the extension is built here)


def test_records_with_headers_take_the_c_entry_and_read_back_alike(
    tansu: Peer, topic: str, pool_name: str, route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shmkafka.facades.kafka_python.producer import KafkaProducer as Facade

    python_sends: list[Any] = []
    original = Facade._send
    monkeypatch.setattr(Facade, "_send", lambda self, *a, **k: python_sends.append(a) or
                        original(self, *a, **k))  # fmt: skip
    eight = [(f"h{i}", b"%d" % i) for i in range(8)]
    cases = [
        [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")],
        [("clé", b"valeur"), ("none", None), ("", b"")],  # UTF-8 key, a null value
        eight,
        [*eight, ("ninth", b"9")],  # more than the C path takes: Python's
    ]
    with KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, linger_ms=5) as p:
        p.send(topic, b"warm", key=b"k").get(30)
        python_sends.clear()
        futures = [p.send(topic, b"v%d" % i, key=b"k", headers=h) for i, h in enumerate(cases)]
        sizes = [f.get(30).serialized_header_size for f in futures]
        with pytest.raises(TypeError):
            p.send(topic, b"t", key=b"k", headers=(("h", b"1"),))  # a tuple: kafka-python's no
    assert sizes == [sum(len(k.encode()) + len(v or b"") for k, v in h) for h in cases]
    taken_by_python = len(python_sends)
    # in C all but the ninth header and the tuple; without C, every call is Python's
    assert taken_by_python == (2 if route == "c" else len(cases) + 1)
    read = {m.value(): m.headers() for m in consume_all(tansu, topic, list(range(PARTITIONS)),
                                                        len(cases) + 1)}  # fmt: skip
    for i, headers in enumerate(cases):
        assert [(k, v) for k, v in read[b"v%d" % i] or []] == headers
