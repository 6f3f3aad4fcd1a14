"""confluent-kafka's Producer contract beyond produce/poll/flush: produce_batch, purge's
flags, close/len/bool/context manager, subclassing, error_cb and logger, statistics, and
producers dropped without close. Where confluent-kafka's behaviour is the question, it runs
beside ours in the test."""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest

from shmkafka import Producer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.confluent_kafka import KafkaError, KafkaException
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.producer import supervisor
from tests.integration.kafka_io import cluster, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")


@pytest.fixture
def topic(tansu: Peer) -> str:
    name = unique_topic("capi")
    with cluster(tansu) as c:
        c.ensure_topic(name, 2)
    return name


def _errors_until(producer: Any, errors: list[Any], count: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while len(errors) < count and time.monotonic() < deadline:
        producer.poll(0.1)


def test_produce_batch_queues_reports_and_marks_failures(
    tansu: Peer, topic: str, pool_name: str
) -> None:
    reports: list[tuple[Any, bytes]] = []
    own: list[bytes] = []
    conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
            "message.max.bytes": 10_000}  # fmt: skip
    with Producer(conf) as p:
        messages: list[dict[str, Any]] = [
            {"value": b"a", "key": b"k"},
            {"value": "b"},
            {"value": b"x" * 20_000},  # too large: not queued, marked
            {"value": b"c", "callback": lambda e, m: own.append(m.value())},
        ]
        queued = p.produce_batch(
            topic, messages, partition=1, on_delivery=lambda e, m: reports.append((e, m.value()))
        )
        assert queued == 3
        assert messages[2]["_error"].code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert messages[2]["_error"].str().startswith("Message failed: ")
        assert all("_error" not in m for i, m in enumerate(messages) if i != 2)
        assert p.flush(30) == 0
    assert sorted(v for _, v in reports) == [b"a", b"b"] and all(e is None for e, _ in reports)
    assert own == [b"c"]


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        ((5, []), TypeError),
        (("t", "not a list"), TypeError),
        (("t", [5]), TypeError),
        (("t", [{"value": 5}]), TypeError),
        (("t", [{"value": b"v", "partition": "x"}]), TypeError),
        (("t", [{"value": b"v", "timestamp": 0}]), NotImplementedError),
        (("t", [{"value": b"v", "headers": 5}]), ValueError),
    ],
)
def test_produce_batch_checks_arguments_as_confluent_kafka(
    args: tuple[Any, ...], kind: type[Exception]
) -> None:
    mine, theirs = Producer({}), confluent_kafka.Producer({})
    for producer in (mine, theirs):
        with pytest.raises(kind) as raised:
            producer.produce_batch(*args)
        if producer is mine:
            message = str(raised.value)
        else:
            assert str(raised.value) == message
        assert len(producer) == 0
    assert mine.produce_batch("t", []) == 0 == theirs.produce_batch("t", [])
    mine.close()


def test_purge_flags(tansu: Peer, topic: str, pool_name: str) -> None:
    conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
            "linger.ms": 3000, "batch.size": 1 << 20}  # fmt: skip
    errors: list[Any] = []
    p = Producer(conf)
    for _ in range(5):
        p.produce(topic, b"x", b"k", on_delivery=lambda e, m: errors.append(e))
    p.produce("not-known-yet-" + topic, b"y", on_delivery=lambda e, m: errors.append(e))
    p.purge(in_queue=False, in_flight=False)
    p.purge(in_queue=False)  # nothing is in flight: a lingering batch is still queued
    assert p.poll(0.2) == 0 and len(p) == 6 and errors == []
    p.purge(in_flight=False)
    assert p.poll(1) == 6 and len(p) == 0
    assert [e.code() for e in errors] == [KafkaError._PURGE_QUEUE] * 6
    assert p.close() is True


def _closed_calls(p: Any) -> list[Callable[[], Any]]:
    return [
        lambda: p.produce("t", b"x"), lambda: p.poll(0), lambda: p.flush(0), lambda: p.purge(),
        lambda: p.produce_batch("t", [{"value": b"x"}]),
    ]  # fmt: skip


def test_close_len_bool_and_use_after_close() -> None:
    mine, theirs = Producer({}), confluent_kafka.Producer({})
    for p in (mine, theirs):
        assert bool(p) is True and len(p) == 0
        with p as entered:
            assert entered is p
        assert p.close() is True and len(p) == 0 and bool(p) is True
        for call in _closed_calls(p):
            with pytest.raises(RuntimeError, match="Producer has been closed"):
                call()
        with pytest.raises(RuntimeError, match="Handle has been closed"):
            p.list_topics(timeout=0.1)


def test_a_subclass_that_skips_init_is_a_closed_producer() -> None:
    class Uninitialized(Producer):
        def __init__(self) -> None:  # no super().__init__()
            pass

    p = Uninitialized()
    assert len(p) == 0 and bool(p) and p.close() is True
    for call in (lambda: p.produce("t", b"x"), lambda: p.poll(0), lambda: p.flush(0),
                 lambda: p.init_transactions(0.1)):  # fmt: skip
        with pytest.raises(RuntimeError, match="Producer has been closed"):
            call()
    with pytest.raises(RuntimeError, match="already __init__"):
        Producer.__init__(Producer({}), {})


def test_transactions_answer_as_without_transactional_id() -> None:
    mine, theirs = Producer({}), confluent_kafka.Producer({})
    for p in (mine, theirs):
        with pytest.raises(KafkaException) as raised:
            p.init_transactions(0.1)
        assert raised.value.args[0].code() == KafkaError._NOT_CONFIGURED
    mine.close()


def test_without_bootstrap_records_time_out_and_error_cb_says_why() -> None:
    errors: list[Any] = []
    reports: list[Any] = []
    p = Producer({"message.timeout.ms": 300, "error_cb": errors.append})
    p.produce("t", b"x", partition=1, on_delivery=lambda e, m: reports.append((e, m)))
    assert len(p) == 1
    assert p.flush(10) == 0
    ((error, message),) = reports
    assert error.code() == KafkaError._MSG_TIMED_OUT and message.error() == error
    assert message.offset() is None and message.value() == b"x"
    assert [e.code() for e in errors] == [KafkaError._ALL_BROKERS_DOWN]
    assert "bootstrap.servers" in errors[0].str()
    p.close()


@pytest.mark.parametrize(
    ("bootstrap", "first"),
    [("127.0.0.1:1", KafkaError._TRANSPORT), ("nonexistent.invalid:9092", KafkaError._RESOLVE)],
)
def test_error_cb_hears_the_senders_connection_errors(
    bootstrap: str, first: int, pool_name: str
) -> None:
    """As confluent-kafka: the failed connection, then all brokers down, within a second or
    two, through poll(); compared with confluent-kafka's own run."""
    seen: dict[str, list[Any]] = {"mine": [], "theirs": []}
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
    theirs = confluent_kafka.Producer({**conf, "error_cb": seen["theirs"].append})
    _errors_until(theirs, seen["theirs"], 2, 10)
    mine = Producer({**conf, "shmkafka.pool": pool_name, "error_cb": seen["mine"].append})
    _errors_until(mine, seen["mine"], 2, 10)
    codes = {who: [e.code() for e in errors[:2]] for who, errors in seen.items()}
    assert codes["mine"] == codes["theirs"] == [first, KafkaError._ALL_BROKERS_DOWN]
    mine_text, their_text = seen["mine"][0].str(), seen["theirs"][0].str()
    assert mine_text.split(":", 2)[:2] == their_text.split(":", 2)[:2]  # host:port/bootstrap
    assert seen["mine"][1].str() == "1/1 brokers are down"
    mine.close(0)


def test_errors_go_to_the_logger_without_error_cb(
    pool_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("app.kafka")
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "shmkafka.pool": pool_name,
                  "logger": logger})  # fmt: skip
    with caplog.at_level(logging.INFO, logger="app.kafka"):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            "brokers are down" in r.getMessage() for r in caplog.records
        ):
            p.poll(0.1)
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert ("app.kafka", "ERROR", "1/1 brokers are down") in lines
    assert any(name == "app.kafka" and "Sender of pool" in text for name, _, text in lines)
    p.close(0)


def test_a_sender_that_exits_at_start_says_why(
    pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_command(self: supervisor.SenderSupervisor) -> list[str]:
        del self
        code = "import sys; print('cannot start: bad thing', file=sys.stderr); sys.exit(3)"
        return [supervisor.sys.executable, "-c", code]

    monkeypatch.setattr(supervisor.SenderSupervisor, "_command", failing_command)
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        Producer({"bootstrap.servers": "127.0.0.1:1", "shmkafka.pool": pool_name})
    assert time.monotonic() - started < 5
    text = raised.value.args[0].str()
    assert "exited at start (status 3)" in text and "cannot start: bad thing" in text
    assert not SharedPool.exists(pool_name)  # the pool it made went with it


def test_statistics_follow_librdkafkas_schema(tansu: Peer, topic: str, pool_name: str) -> None:
    documents: list[dict[str, Any]] = []
    conf = {"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
            "statistics.interval.ms": 50}  # fmt: skip
    conf["stats_cb"] = lambda s: documents.append(json.loads(s))
    with Producer(conf) as p:
        for i in range(20):
            p.produce(topic, b"v%d" % i, b"k%d" % i)
        p.flush(30)
        deadline = time.monotonic() + 5  # (the Sender publishes its counters every 100 ms)
        while time.monotonic() < deadline and not any(
            b["state"] == "UP" and b["rx"] for b in documents[-1]["brokers"].values()
        ):
            p.poll(0.05)
    theirs: list[dict[str, Any]] = []
    reference = confluent_kafka.Producer({
        "bootstrap.servers": tansu.bootstrap, "statistics.interval.ms": 50,
        "stats_cb": lambda s: theirs.append(json.loads(s)),
    })  # fmt: skip
    reference.produce(topic, b"v")
    reference.flush(30)
    reference.poll(0.2)
    assert documents and theirs
    last = documents[-1]
    expected = {"name", "client_id", "type", "ts", "time", "age", "replyq", "msg_cnt", "msg_size",
                "msg_max", "msg_size_max", "brokers", "topics", "tx", "tx_bytes", "rx",
                "rx_bytes", "txmsgs", "txmsg_bytes"}  # fmt: skip
    assert expected <= set(last) and expected <= set(theirs[-1])
    assert last["type"] == theirs[-1]["type"] == "producer"
    assert last["txmsgs"] >= 20 and last["msg_cnt"] == 0
    partitions = last["topics"][topic]["partitions"]
    assert set(partitions) == {"0", "1"}
    assert set(partitions["0"]) >= {"partition", "leader", "msgq_cnt", "msgq_bytes"}
    broker_fields = {"name", "nodeid", "state", "outbuf_cnt", "waitresp_cnt", "tx", "txbytes",
                     "rx", "rxbytes", "rtt", "connects"}  # fmt: skip
    up = [b for b in last["brokers"].values() if b["state"] == "UP"]
    assert up and all(broker_fields <= set(b) for b in up)
    assert all(broker_fields <= set(b) for b in theirs[-1]["brokers"].values())
    assert sum(b["tx"] for b in up) >= 1 and sum(b["rx"] for b in up) >= 1
    assert max(b["rtt"]["cnt"] for b in up) >= 1 and last["rx_bytes"] > 0
    assert set(up[0]["rtt"]) == set(next(iter(theirs[-1]["brokers"].values()))["rtt"])


def test_dropped_producers_free_their_process_slots(pool_name: str) -> None:
    """confluent-kafka frees a producer's handle when it is collected: so do we (a pool has
    a fixed number of process slots)."""
    conf = {"bootstrap.servers": "127.0.0.1:1", "shmkafka.pool": pool_name,
            "shmkafka.max.processes": 4}  # fmt: skip
    keep = Producer(conf)  # holds the pool (and its Sender) for the loop
    make: Callable[[], Any] = lambda: Producer(conf)  # noqa: E731
    for _ in range(12):
        p = make()
        p.produce("t", b"x")
        del p
        gc.collect()
    keep.close(0)


def test_list_topics_on_a_fresh_pool_answers_once_the_cluster_is_reached(
    tansu: Peer, pool_name: str
) -> None:
    with Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name}) as p:
        metadata = p.list_topics(timeout=20)  # no topic known yet: the connection suffices
        assert isinstance(metadata.topics, dict)


def test_a_logger_that_raises_does_not_stop_delivery_reports(pool_name: str) -> None:
    class Broken(logging.Logger):
        def log(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("this logger is broken")

    reports: list[Any] = []
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "shmkafka.pool": pool_name,
                  "message.timeout.ms": 800, "logger": Broken("broken")})  # fmt: skip
    p.produce("t", b"x", on_delivery=lambda e, m: reports.append(e))
    assert p.flush(15) == 0  # the completion thread outlived the logger's exceptions
    assert [e.code() for e in reports] == [KafkaError._MSG_TIMED_OUT]
    p.close()


def test_flush_returns_only_once_every_report_was_served(
    tansu: Peer, topic: str, pool_name: str
) -> None:
    # A record is done (not outstanding) a moment before its report is queued by the
    # completion thread: flush() must not return in between. Widen the moment.
    reports: list[Any] = []
    p = Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name})
    p.produce(topic, b"warm", on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0 and len(reports) == 1
    handle = p._client
    queue_reports = handle.on_done

    def slow_queue(futures: list[Any]) -> None:
        time.sleep(0.3)
        queue_reports(futures)

    handle.on_done = slow_queue
    for i in range(20):
        p.produce(topic, b"v%d" % i, on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0
    assert len(reports) == 21 and reports == [None] * 21
    p.close()


def test_records_waiting_for_a_new_topic_keep_their_order_while_another_thread_polls(
    tansu: Peer, topic: str, pool_name: str
) -> None:
    # A fresh pool: every record waits in the app until the Sender has the topic's metadata,
    # and the polling thread appends them as it lands while the main thread goes on producing.
    import threading

    count = 3000
    offsets: dict[int, tuple[Any, int]] = {}

    def report(err: Any, msg: Any) -> None:
        offsets[int(msg.value())] = (err, msg.offset())

    p = Producer({"bootstrap.servers": tansu.bootstrap, "shmkafka.pool": pool_name,
                  "enable.idempotence": True})  # fmt: skip
    polling = threading.Event()
    polling.set()

    def poll() -> None:
        while polling.is_set():
            p.poll(0.001)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for i in range(count):
            p.produce(topic, b"%d" % i, partition=0, on_delivery=report)
        assert p.flush(30) == 0
    finally:
        polling.clear()
        poller.join()
    p.close()
    assert [offsets.get(i) for i in range(count)] == [(None, i) for i in range(count)]


def test_a_record_produced_as_its_topic_becomes_known_stays_behind_the_waiting_ones(
    pool_name: str,
) -> None:
    """Found by the soak: produce() served the records waiting for their topic, found the
    topic still unknown, and then, the metadata having arrived in between, appended the new
    record at once, ahead of the earlier ones. The window is held open here: the first
    serving pass with records waiting returns only once the Sender has the topic."""
    topic = unique_topic("known-meanwhile")
    with BrokerStub(nodes=1, partitions=1) as stub:
        p = Producer({"bootstrap.servers": stub.bootstrap, "shmkafka.pool": pool_name,
                      "enable.idempotence": True})  # fmt: skip
        serve, waiting = [p._serve_unassigned], p._unassigned
        held: list[bool] = []

        def serve_then_wait_for_the_topic(handle: Any) -> None:
            serve[0](handle)
            if waiting and not held:
                held.append(True)
                deadline = time.monotonic() + 10
                while handle.pool.directory.partitions(topic) is None:
                    assert time.monotonic() < deadline, "the topic never became known"
                    time.sleep(0.01)

        p._serve_unassigned = serve_then_wait_for_the_topic  # type: ignore[method-assign]
        offsets: dict[bytes, int] = {}

        def delivered(err: Any, msg: Any) -> None:
            offsets[msg.value()] = msg.offset()

        for i in range(20):
            p.produce(topic, b"%d" % i, partition=0, on_delivery=delivered)
        assert p.flush(10) == 0
        serve.clear()
        del p  # (the producer is released: its pool's Sender goes idle)
        gc.collect()
    assert held, "the window was never opened: the test did not test the race"
    assert [offsets[b"%d" % i] for i in range(20)] == list(range(20))
