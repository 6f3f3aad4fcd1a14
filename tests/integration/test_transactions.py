"""Transactions through the pool, on the real peers (Tansu and librdkafka's mock cluster):
kafka-python's API here; the log must hold each transaction's data batches, each followed
by its COMMIT or ABORT marker, and nothing else."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from shmkafka.kafka import KafkaProducer
from shmkafka.kafka.errors import IllegalStateError, KafkaError, ProducerFencedError
from shmkafka.protocol.control import markers_of
from shmkafka.protocol.records import RecordBatch
from tests.conftest import wait_removed
from tests.integration.kafka_io import Cluster, cluster, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")


def _txn_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def log_of(c: Cluster, peer: Peer, topic: str, partition: int, markers: int) -> list[RecordBatch]:
    """The partition's batches, once it holds ``markers`` control batches."""
    deadline = time.monotonic() + 15
    while True:
        end = c.list_offset(topic, partition, -1)  # (LATEST: the high watermark)
        batches = c.fetch_batches(topic, partition, end, verify_crc=peer.name != "mock")
        if sum(b.header.is_control for b in batches) >= markers or time.monotonic() > deadline:
            return batches
        time.sleep(0.1)


def outcomes(
    batches: list[RecordBatch], unmarked: dict[int, list[bytes]] | None = None
) -> list[tuple[str, list[bytes]]]:
    """[("COMMIT" | "ABORT", the values of its producer's data batches before the marker),
    ...], in the markers' order. A marker ends the transaction of its own producer (the
    producer id in its header), not another's data before it. Data no marker ends fails the
    test, unless ``unmarked`` takes it, by producer id."""
    out: list[tuple[str, list[bytes]]] = []
    pending: dict[int, list[bytes]] = {}
    for batch in batches:
        producer = batch.header.producer_id
        if batch.header.is_control:
            (marker,) = markers_of(batch)
            out.append((marker.control_type.name, pending.pop(producer, [])))
        else:
            assert batch.header.is_transactional
            pending.setdefault(producer, []).extend(r.value for r in batch.records)
    if unmarked is None:
        assert not pending, f"data after the last marker: {pending}"
    else:
        unmarked.update(pending)
    return out


def test_kafka_python_commit_and_abort(peer: Peer, pool_name: str) -> None:
    topic = unique_topic("txkp")
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        p = KafkaProducer(bootstrap_servers=peer.bootstrap, transactional_id=_txn_id("kp"),
                          pool=pool_name)  # fmt: skip
        try:
            p.init_transactions()
            assert not p._fast_enabled()  # (outside a transaction every send is checked)
            p.begin_transaction()
            assert p._fast_enabled() == p._handle.appends_in_c  # (the C entry, guarded)
            futures = [p.send(topic, f"c{i}".encode(), partition=0) for i in range(5)]
            p.commit_transaction()
            assert not p._fast_enabled()
            assert all(f.is_done and f.succeeded() for f in futures)
            p.begin_transaction()
            aborted = [p.send(topic, f"a{i}".encode(), partition=0) for i in range(3)]
            p.flush()
            p.abort_transaction()
            assert all(f.is_done for f in aborted)
            p.begin_transaction()
            p.send(topic, b"last", partition=0)
            p.commit_transaction()
        finally:
            p.close()
        batches = log_of(c, peer, topic, 0, 3)
    assert outcomes(batches) == [
        ("COMMIT", [f"c{i}".encode() for i in range(5)]),
        ("ABORT", [f"a{i}".encode() for i in range(3)]),
        ("COMMIT", [b"last"]),
    ]
    producer_ids = {b.header.producer_id for b in batches}
    assert len(producer_ids) == 1


KP_STEPS = (
    ("begin before init", lambda p, t: p.begin_transaction()),
    ("commit before init", lambda p, t: p.commit_transaction()),
    ("init", lambda p, t: p.init_transactions()),
    ("init again", lambda p, t: p.init_transactions()),
    ("send before begin", lambda p, t: p.send(t, b"x", partition=0)),
    ("commit without begin", lambda p, t: p.commit_transaction()),
    ("abort without begin", lambda p, t: p.abort_transaction()),
    ("begin", lambda p, t: p.begin_transaction()),
    ("begin again", lambda p, t: p.begin_transaction()),
    ("send offsets with a bad group", lambda p, t: p.send_offsets_to_transaction({}, 42)),
    ("abort", lambda p, t: p.abort_transaction()),
)


def _kp_outcome(call: Any, producer: Any, topic: str) -> tuple[str, str]:
    try:
        call(producer, topic)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, str(exc).replace(producer.config["transactional_id"], "ID")
    return "ok", ""


def test_kafka_python_calls_out_of_order_fail_as_kafka_pythons(tansu: Peer, pool_name: str) -> None:
    """Each call of KP_STEPS on kafka-python's KafkaProducer and on ours: the same
    exception class and message."""
    import kafka

    topic = unique_topic("txkpsteps")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    conf = {"bootstrap_servers": tansu.bootstrap, "transactional_id": _txn_id("kps")}
    theirs = kafka.KafkaProducer(**conf)
    ours = KafkaProducer(pool=pool_name, **conf)
    try:
        for label, call in KP_STEPS:
            assert _kp_outcome(call, ours, topic) == _kp_outcome(call, theirs, topic), label
    finally:
        ours.close()
        theirs.close()


def test_kafka_python_state_errors(tansu: Peer, pool_name: str) -> None:
    """kafka-python's errors for calls out of order (checked against kafka-python itself in
    tests/conformance)."""
    p = KafkaProducer(bootstrap_servers=tansu.bootstrap, transactional_id=_txn_id("st"),
                      pool=pool_name)  # fmt: skip
    try:
        with pytest.raises(KafkaError):
            p.begin_transaction()  # before init
        p.init_transactions()
        with pytest.raises(IllegalStateError, match="Cannot call send in state READY"):
            p.send("t", b"x")
        with pytest.raises(KafkaError, match="Invalid transition"):
            p.commit_transaction()
        p.begin_transaction()
        with pytest.raises(KafkaError, match="Invalid transition"):
            p.begin_transaction()
        p.abort_transaction()
    finally:
        p.close()
    plain = KafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name + "x")
    try:
        with pytest.raises(IllegalStateError, match="without setting a transactional_id"):
            plain.init_transactions()
    finally:
        plain.close()
    wait_removed(pool_name + "x")


def test_a_second_producer_fences_the_first(peer: Peer, pool_name: str) -> None:
    txn_id, topic = _txn_id("fence"), unique_topic("txfence")
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        conf = {"bootstrap_servers": peer.bootstrap, "transactional_id": txn_id}
        first = KafkaProducer(pool=pool_name, **conf)
        second = KafkaProducer(pool=pool_name, **conf)
        try:
            first.init_transactions()
            first.begin_transaction()
            first.send(topic, b"fenced", partition=0)
            first.send(topic, b"fenced too")  # (the common record: the C entry, in a txn)
            second.init_transactions()
            with pytest.raises(ProducerFencedError):  # (the C entry's guard: owner changed)
                first.send(topic, b"late")
            with pytest.raises(ProducerFencedError):
                first.commit_transaction()
            second.begin_transaction()
            second.send(topic, b"kept", partition=0)
            second.commit_transaction()
        finally:
            first.close(0)
            second.close()
        batches = log_of(c, peer, topic, 0, 1)
    unmarked: dict[int, list[bytes]] = {}
    committed = [values for kind, values in outcomes(batches, unmarked) if kind == "COMMIT"]
    assert committed == [[b"kept"]]
    # A record of the first producer is in the log when it was sent before the second's
    # init_transactions was taken (else it failed, queued, as fenced). Kafka's coordinator
    # then aborts the fenced transaction; librdkafka's mock cluster gives the second a new
    # producer id and writes no marker for the first's: its records stay unmarked there,
    # never committed (they used to be counted with the second's commit, after them).
    assert all(set(values) <= {b"fenced", b"fenced too"} for values in unmarked.values())
    assert not unmarked or peer.name == "mock", unmarked


# ---------------------------------------------------------------------- confluent-kafka's API

STEPS = (
    ("produce before init", lambda p: p.produce("t", b"x")),
    ("begin before init", lambda p: p.begin_transaction()),
    ("commit before init", lambda p: p.commit_transaction(5)),
    ("init", lambda p: p.init_transactions(30)),
    ("init again", lambda p: p.init_transactions(30)),
    ("produce after init", lambda p: p.produce("t", b"x")),
    ("commit without begin", lambda p: p.commit_transaction(5)),
    ("abort without begin", lambda p: p.abort_transaction(5)),
    ("begin", lambda p: p.begin_transaction()),
    ("begin again", lambda p: p.begin_transaction()),
    ("send_offsets without metadata", lambda p: p.send_offsets_to_transaction([], None)),
    ("commit an empty transaction", lambda p: p.commit_transaction(10)),
)


def _outcome(call: Any, producer: Any) -> tuple[Any, ...]:
    import confluent_kafka

    try:
        call(producer)
    except confluent_kafka.KafkaException as exc:
        e = exc.args[0]
        return ("KafkaException", e.name(), e.str(), e.retriable(), e.txn_requires_abort(),
                e.fatal())  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        return (type(exc).__name__, str(exc))
    return ("ok",)


def test_confluent_calls_out_of_order_fail_as_the_peers(tansu: Peer, pool_name: str) -> None:
    """Each call of STEPS, on confluent-kafka's Producer and on ours: the same exception,
    error name, text and flags (librdkafka's state names, _NOT_CONFIGURED without an id)."""
    import confluent_kafka

    from shmkafka.confluent_kafka import Producer

    conf = {"bootstrap.servers": tansu.bootstrap, "transactional.id": _txn_id("cf")}
    theirs = confluent_kafka.Producer(conf)
    ours = Producer({**conf, "transactional.id": _txn_id("cf"), "shmkafka.pool": pool_name})
    try:
        for label, call in STEPS:
            assert _outcome(call, ours) == _outcome(call, theirs), label
        plain_theirs = confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap})
        plain_ours = Producer({"bootstrap.servers": tansu.bootstrap,
                               "shmkafka.pool": pool_name + "x"})  # fmt: skip
        for call in (lambda p: p.init_transactions(1), lambda p: p.begin_transaction()):
            assert _outcome(call, plain_ours) == _outcome(call, plain_theirs)
        plain_ours.close()
    finally:
        ours.close()
    for bad in ({"enable.idempotence": False}, {"message.timeout.ms": 120_000}):

        def make(cls: Any, extra: dict[str, Any] = bad) -> Any:
            return lambda _: cls({**conf, **extra})

        assert _outcome(make(Producer), None) == _outcome(make(confluent_kafka.Producer), None)
    wait_removed(pool_name + "x")


def test_consume_transform_produce_with_confluent(tansu: Peer, pool_name: str) -> None:
    """The example of docs/transactions.md: a confluent-kafka Consumer reads, our Producer
    writes the transformed records and commits the consumer's offsets in the transaction;
    a read_committed consumer sees the output, and the group's committed offset moved."""
    import confluent_kafka

    from shmkafka.confluent_kafka import Producer

    source, sink, group = unique_topic("ctp-in"), unique_topic("ctp-out"), unique_topic("ctp-g")
    with cluster(tansu) as c:
        c.ensure_topic(source, 1)
        c.ensure_topic(sink, 1)
    seed = confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap})
    for i in range(20):
        seed.produce(source, f"in-{i}".encode(), partition=0)
    assert seed.flush(30) == 0
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": tansu.bootstrap, "group.id": group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })  # fmt: skip
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "transactional.id": _txn_id("ctp"),
                         "shmkafka.pool": pool_name})  # fmt: skip
    try:
        # (assigned, not subscribed: a group join on Tansu takes seconds; the offsets are
        # committed for the group just the same)
        consumer.assign([confluent_kafka.TopicPartition(source, 0, 0)])
        producer.init_transactions(30)
        done = 0
        deadline = time.monotonic() + 60
        while done < 20 and time.monotonic() < deadline:
            messages = consumer.consume(10, timeout=1)
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, m.value().upper(), partition=0)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
            done += len(messages)
        assert done == 20
        committed = consumer.committed([confluent_kafka.TopicPartition(source, 0)], timeout=10)
    finally:
        consumer.close()
        producer.close()
    assert committed[0].offset == 20
    reader = confluent_kafka.Consumer({
        "bootstrap.servers": tansu.bootstrap, "group.id": unique_topic("ctp-r"),
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
    })  # fmt: skip
    try:
        reader.assign([confluent_kafka.TopicPartition(sink, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 20 and time.monotonic() < deadline:
            values += [m.value() for m in reader.consume(20, timeout=1) if not m.error()]
    finally:
        reader.close()
    assert values == [f"IN-{i}".encode() for i in range(20)]


# ---------------------------------------------------------------------- aiokafka's API


def test_aiokafka_transaction_context_commits_and_aborts(peer: Peer, pool_name: str) -> None:
    """``transaction()`` commits; an exception inside aborts it and goes out; send outside a
    transaction is aiokafka's IllegalOperation."""
    import asyncio

    from shmkafka.aiokafka import AIOKafkaProducer
    from shmkafka.aiokafka.errors import IllegalOperation

    topic = unique_topic("txaio")
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)

        async def body() -> None:
            # (a long linger: "never sent" stays queued until the abort; commits and flush
            # send at once)
            async with AIOKafkaProducer(bootstrap_servers=peer.bootstrap, pool=pool_name,
                                        transactional_id=_txn_id("aio"),
                                        linger_ms=10_000) as p:  # fmt: skip
                with pytest.raises(IllegalOperation):
                    await p.send(topic, b"outside", partition=0)
                async with p.transaction():
                    first = await p.send(topic, b"kept", partition=0)
                assert (await first).offset >= 0
                with pytest.raises(RuntimeError, match="boom"):
                    async with p.transaction():
                        await p.send(topic, b"dropped", partition=0)
                        await p.flush()  # (sent: the abort leaves its marker)
                        raise RuntimeError("boom")
                with pytest.raises(RuntimeError, match="boom"):
                    async with p.transaction():
                        unsent = await p.send(topic, b"never sent", partition=0)
                        raise RuntimeError("boom")
                with pytest.raises(Exception, match="transaction was aborted"):
                    await unsent
                await p.begin_transaction()
                await p.send(topic, b"also kept", partition=0)
                await p.commit_transaction()
                with pytest.raises(AssertionError, match="Invalid state transition"):
                    await p.commit_transaction()

        asyncio.run(body())
        batches = log_of(c, peer, topic, 0, 3)
    assert outcomes(batches) == [
        ("COMMIT", [b"kept"]), ("ABORT", [b"dropped"]), ("COMMIT", [b"also kept"]),
    ]  # fmt: skip


def test_confluent_calls_without_a_cluster_time_out_then_conflict(pool_name: str) -> None:
    """confluent-kafka's own test_transaction_api, side by side: no bootstrap.servers, so
    init_transactions times out (retriable), and every later call conflicts with it."""
    import confluent_kafka

    from shmkafka.confluent_kafka import Producer

    consumer = confluent_kafka.Consumer({"group.id": "testgroup", "log_level": 0})
    metadata = consumer.consumer_group_metadata()
    consumer.close()
    steps = (
        lambda p: p.init_transactions(0.5),
        lambda p: p.begin_transaction(),
        lambda p: p.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition("topic", 0, 123)], metadata
        ),
        lambda p: p.commit_transaction(0.5),
        lambda p: p.abort_transaction(0.5),
    )
    theirs = confluent_kafka.Producer({"transactional.id": "test"})
    ours = Producer({"transactional.id": "test", "shmkafka.pool": pool_name})
    outcomes = [(_outcome(step, ours), _outcome(step, theirs)) for step in steps]
    assert ours.close()
    for mine, peer in outcomes:
        assert mine == peer
    assert [o[0][1] for o in outcomes] == ["_TIMED_OUT"] + ["_CONFLICT"] * 4


def test_a_producer_of_another_client_fences_ours(tansu: Peer, pool_name: str) -> None:
    """confluent-kafka's own Producer takes the transactional id (on another host, say): the
    coordinator fences ours, whose next transaction fails with ProducerFencedError."""
    import confluent_kafka

    txn_id, topic = _txn_id("xfence"), unique_topic("txxfence")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    ours = KafkaProducer(bootstrap_servers=tansu.bootstrap, transactional_id=txn_id,
                         pool=pool_name)  # fmt: skip
    try:
        ours.init_transactions()
        ours.begin_transaction()
        ours.send(topic, b"ours", partition=0)
        ours.commit_transaction()
        theirs = confluent_kafka.Producer({"bootstrap.servers": tansu.bootstrap,
                                           "transactional.id": txn_id})  # fmt: skip
        theirs.init_transactions(30)
        ours.begin_transaction()
        fenced = ours.send(topic, b"fenced", partition=0)
        with pytest.raises(ProducerFencedError):
            ours.commit_transaction()
        assert isinstance(fenced.exception, ProducerFencedError)  # (failed, not left queued)
        with pytest.raises(KafkaError, match="error state"):
            ours.begin_transaction()  # (fatal: nothing more, as kafka-python)
        del theirs
    finally:
        ours.close(0)


def _in_a_transaction(tansu: Peer, pool_name: str) -> Any:
    """Our confluent-kafka Producer, transactional, initialized, in a transaction."""
    from shmkafka.confluent_kafka import Producer

    p = Producer({"bootstrap.servers": tansu.bootstrap, "transactional.id": _txn_id("tx"),
                  "shmkafka.pool": pool_name})  # fmt: skip
    p.init_transactions(30)
    p.begin_transaction()
    return p


def test_no_record_joins_a_transaction_being_committed(tansu: Peer, pool_name: str) -> None:
    """A commit under way refuses sends (as librdkafka: _STATE) until it ends; a timed-out
    commit is resumed by calling it again. The record produced before it, to a topic the
    pool did not know yet (it waited in the process for the topic's metadata), is part of
    the commit: its report is in when the commit returns, and it is read back committed.
    (Before, the commit ended without it and it waited in the process for a minute.)"""
    import confluent_kafka

    topic = unique_topic("txcommitting")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
        reports: list[Any] = []
        p = _in_a_transaction(tansu, pool_name)
        try:
            p.produce(topic, b"in", partition=0, on_delivery=lambda e, m: reports.append(e))
            with pytest.raises(confluent_kafka.KafkaException) as timed_out:
                p.commit_transaction(0.000001)  # (no coordinator answers within a microsecond)
            assert timed_out.value.args[0].code() == confluent_kafka.KafkaError._TIMED_OUT
            assert timed_out.value.args[0].retriable()
            with pytest.raises(confluent_kafka.KafkaException) as refused:
                p.produce(topic, b"late", partition=0)
            assert refused.value.args[0].code() == confluent_kafka.KafkaError._STATE
            p.commit_transaction(30)  # (resumed)
            assert p.flush(0) == 0 and reports == [None]
        finally:
            p.close()
        assert outcomes(log_of(c, tansu, topic, 0, 1)) == [("COMMIT", [b"in"])]


@pytest.mark.parametrize("client", ["confluent-kafka", "shmkafka"])
def test_a_commit_serves_the_delivery_reports_as_the_peers(
    tansu: Peer, pool_name: str, client: str
) -> None:
    """librdkafka's commit flushes, which serves the delivery reports: when the commit
    returns, every record's callback has run. Run on the peer and on ours."""
    import confluent_kafka

    from shmkafka.confluent_kafka import Producer

    topic = unique_topic("txreports")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
    conf = {"bootstrap.servers": tansu.bootstrap, "transactional.id": _txn_id("rp")}
    p = (confluent_kafka.Producer(conf) if client == "confluent-kafka"
         else Producer({**conf, "shmkafka.pool": pool_name}))  # fmt: skip
    reports: list[Any] = []
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, b"%d" % i, partition=0, on_delivery=lambda e, m: reports.append(e))
        p.commit_transaction(30)
        assert reports == [None, None, None] and len(p) == 0
    finally:
        p.flush(10)
        if client == "shmkafka":
            p.close()


def test_an_abort_purges_the_records_waiting_for_their_topic(tansu: Peer, pool_name: str) -> None:
    """As librdkafka's abort: a record still waiting in the process for its topic's metadata
    gets _PURGE_QUEUE, and is never appended after the abort."""
    import confluent_kafka

    topic = unique_topic("txpurged")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 1)
        reports: list[Any] = []
        p = _in_a_transaction(tansu, pool_name)
        try:
            p.produce(topic, b"waiting", partition=0, on_delivery=lambda e, m: reports.append(e))
            assert p._unassigned  # (the pool never asked for the topic: the record waits)
            p.abort_transaction(30)
            assert p.flush(10) == 0
            assert [e.code() for e in reports] == [confluent_kafka.KafkaError._PURGE_QUEUE]
            p.begin_transaction()
            p.produce(topic, b"next", partition=0)
            p.commit_transaction(30)
        finally:
            p.close()
        assert outcomes(log_of(c, tansu, topic, 0, 1)) == [("COMMIT", [b"next"])]


def test_closing_mid_transaction_aborts_it(peer: Peer, pool_name: str) -> None:
    """As Java's close: an open transaction is aborted, so the pool's Sender does not keep
    it open for a process that lives on (and the pool goes away: the fixture waits)."""
    topic = unique_topic("txclose")
    with cluster(peer) as c:
        c.ensure_topic(topic, 1)
        p = KafkaProducer(bootstrap_servers=peer.bootstrap, transactional_id=_txn_id("close"),
                          pool=pool_name)  # fmt: skip
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"open", partition=0).get(30)
        p.close()
        batches = log_of(c, peer, topic, 0, 1)
    assert outcomes(batches) == [("ABORT", [b"open"])]


def test_a_record_that_fails_while_waiting_for_its_topic_makes_the_commit_abortable(
    pool_name: str,
) -> None:
    """As librdkafka: a record of the transaction that fails before it is sent (here its
    topic never exists, and message.timeout.ms passes) makes the commit fail with
    txn_requires_abort instead of committing without it; the abort then goes through."""
    import confluent_kafka

    from shmkafka.broker_stub.server import BrokerStub
    from shmkafka.confluent_kafka import Producer

    with BrokerStub(nodes=1, auto_create_topics=False) as stub:
        reports: list[Any] = []
        p = Producer({"bootstrap.servers": stub.bootstrap, "transactional.id": _txn_id("nt"),
                      "message.timeout.ms": 800, "shmkafka.pool": pool_name})  # fmt: skip
        try:
            p.init_transactions(30)
            p.begin_transaction()
            p.produce("no-such-topic", b"lost", on_delivery=lambda e, m: reports.append(e))
            with pytest.raises(confluent_kafka.KafkaException) as failed:
                p.commit_transaction(30)
            assert failed.value.args[0].txn_requires_abort()
            assert [e.code() for e in reports] == [confluent_kafka.KafkaError._MSG_TIMED_OUT]
            p.abort_transaction(30)
        finally:
            p.close()
