"""aiokafka 0.14's AIOKafkaProducer contract: each behaviour runs against aiokafka's own
producer and against shmkafka's, on the same Tansu broker, in the same test; the records
are read back with a confluent-kafka consumer."""

from __future__ import annotations

import asyncio
import gc
import inspect
import re
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import aiokafka
import aiokafka.errors
import aiokafka.structs
import pytest

import shmkafka.aiokafka
from shmkafka.aiokafka import AIOKafkaProducer
from shmkafka.broker_stub.server import BrokerStub
from shmkafka.producer import topics
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")
PARTITIONS = 3


@pytest.fixture
def topic(tansu: Peer) -> str:
    name = unique_topic("aio")
    with cluster(tansu) as c:
        c.ensure_topic(name, PARTITIONS)
    return name


def _makers(tansu: Peer, pool_name: str) -> list[Callable[..., Any]]:
    def mine(**configs: Any) -> Any:
        return AIOKafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name, **configs)

    def theirs(**configs: Any) -> Any:
        return aiokafka.AIOKafkaProducer(bootstrap_servers=tansu.bootstrap, **configs)

    return [theirs, mine]


def _run(body: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(body())  # (a fresh loop, closed after: nothing is left running)


def test_the_constructor_is_aiokafkas() -> None:
    ours = inspect.signature(AIOKafkaProducer.__init__).parameters
    theirs = inspect.signature(aiokafka.AIOKafkaProducer.__init__).parameters
    assert set(theirs) <= set(ours)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for n, p in ours.items() if n != "self")
    for cls in (aiokafka.AIOKafkaProducer, AIOKafkaProducer):
        with pytest.raises(TypeError, match="unexpected keyword argument 'batch_size'"):
            cls(batch_size=10)
        with pytest.raises(TypeError):
            cls("localhost:9092")  # type: ignore[misc]  # (keyword-only)


def test_send_and_wait_gives_aiokafkas_record_metadata(
    tansu: Peer, pool_name: str, topic: str
) -> None:
    async def body() -> list[Any]:
        results = []
        for make in _makers(tansu, pool_name):
            async with make() as producer:
                meta = await producer.send_and_wait(topic, b"v", key=b"k", partition=1)
                future = await producer.send(topic, b"w", partition=1)
                assert isinstance(future, asyncio.Future)
                second = await future
                partitions = await producer.partitions_for(topic)
            results.append((meta, second, partitions))
        return results

    (theirs, theirs_next, theirs_parts), (mine, mine_next, mine_parts) = _run(body)
    for meta, following in ((theirs, theirs_next), (mine, mine_next)):
        assert isinstance(meta, aiokafka.structs.RecordMetadata)
        assert (meta.topic, meta.partition) == (topic, 1)
        assert meta.topic_partition == aiokafka.structs.TopicPartition(topic, 1)
        assert following.offset == meta.offset + 1
        assert meta.timestamp_type == 0 and meta.timestamp > 0
    assert (theirs.offset, mine.offset) == (0, 2)  # one partition: aiokafka's came first
    assert theirs_parts == mine_parts == set(range(PARTITIONS))
    values = [m.value() for m in consume_all(tansu, topic, [1], 4)]
    assert values == [b"v", b"w", b"v", b"w"]


def test_acks_zero_resolves_to_none(tansu: Peer, pool_name: str, topic: str) -> None:
    async def body() -> list[Any]:
        out = []
        for make in _makers(tansu, pool_name):
            async with make(acks=0) as producer:
                out.append(await producer.send_and_wait(topic, b"x", partition=0))
        return out

    assert _run(body) == [None, None]
    assert len(consume_all(tansu, topic, [0], 2)) == 2


def test_serializers_batches_and_headers(tansu: Peer, pool_name: str, topic: str) -> None:
    async def body() -> list[Any]:
        out = []
        for make in _makers(tansu, pool_name):
            async with make(key_serializer=str.encode, value_serializer=str.encode) as producer:
                await producer.send_and_wait(topic, "a", key="k", partition=2,
                                             headers=[("h", b"1")])  # fmt: skip
                batch = producer.create_batch()
                for i in range(3):
                    assert batch.append(key=f"k{i}", value=f"b{i}", timestamp=None) is not None
                assert batch.record_count() == 3 and batch.size() > 0
                future = await producer.send_batch(batch, topic, partition=2)
                out.append(await future)
        return out

    metas = _run(body)
    assert [m.partition for m in metas] == [2, 2]
    got = consume_all(tansu, topic, [2], 8)
    assert [m.value() for m in got] == [b"a", b"b0", b"b1", b"b2"] * 2
    assert [m.headers() for m in got[::4]] == [[("h", b"1")]] * 2


def test_stop_twice_then_send_is_producer_closed(tansu: Peer, pool_name: str, topic: str) -> None:
    async def body() -> None:
        for make in _makers(tansu, pool_name):
            producer = make()
            await producer.start()
            await producer.send_and_wait(topic, b"v")
            await producer.stop()
            await producer.stop()
            with pytest.raises(aiokafka.errors.ProducerClosed):
                await producer.send(topic, b"late")

    _run(body)


def test_the_errors_are_aiokafkas(tansu: Peer, pool_name: str, topic: str) -> None:
    assert shmkafka.aiokafka.errors.KafkaTimeoutError is aiokafka.errors.KafkaTimeoutError
    assert not issubclass(shmkafka.aiokafka.errors.IllegalOperation, aiokafka.errors.KafkaError)

    async def body() -> None:
        for make in _makers(tansu, pool_name):
            async with make(max_request_size=1000) as producer:
                with pytest.raises(aiokafka.errors.MessageSizeTooLargeError):
                    await producer.send(topic, b"x" * 2000)

    _run(body)


def test_a_producer_dropped_unstopped_warns(tansu: Peer, pool_name: str) -> None:
    async def body() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name)
        await producer.start()
        dropped = weakref.ref(producer)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del producer
            # (a delivery the completion thread handed to the loop holds it until it runs)
            deadline = time.monotonic() + 10
            while dropped() is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
                gc.collect()
        assert dropped() is None, "the dropped producer was never collected"
        assert any(issubclass(w.category, ResourceWarning) for w in caught)

    _run(body)


def test_stop_is_bounded_when_the_broker_is_gone(pool_name: str) -> None:
    """aiokafka#1101: ours gives up after request_timeout_ms instead of hanging."""

    async def body() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers="127.0.0.1:1", pool=pool_name, request_timeout_ms=1000
        )
        await producer.start()
        send = asyncio.ensure_future(producer.send("nowhere", b"v"))
        with pytest.raises(aiokafka.errors.KafkaError):
            await asyncio.wait_for(send, 10)
        await asyncio.wait_for(producer.stop(), 10)

    _run(body)


def test_many_concurrent_sends_all_arrive_in_order(tansu: Peer, pool_name: str, topic: str) -> None:
    """aiokafka#528's pattern: thousands of send() calls in flight at once."""

    async def body() -> list[Any]:
        async with AIOKafkaProducer(bootstrap_servers=tansu.bootstrap, pool=pool_name) as p:
            futures = [await p.send(topic, b"%d" % i, partition=0) for i in range(2000)]
            return list(await asyncio.gather(*futures))

    metas = _run(body)
    assert [m.offset for m in metas] == list(range(2000))
    values = [m.value() for m in consume_all(tansu, topic, [0], 2000)]
    assert values == [b"%d" % i for i in range(2000)]


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"acks": 122}, "Invalid ACKS parameter"),
        ({"compression_type": "my_custom"}, "Invalid compression type!"),
        ({"security_protocol": "SOME"}, "`security_protocol` should be SSL or PLAINTEXT"),
        ({"security_protocol": "SSL"}, "`ssl_context` is mandatory if security_protocol=='SSL'"),
        ({"acks": 1, "enable_idempotence": True}, "acks=1 not supported if enable_idempotence"),
        ({"security_protocol": "SASL_PLAINTEXT"}, "sasl_plain_username and sasl_plain_password"),
    ],
)
def test_bad_arguments_are_aiokafkas_value_errors(configs: dict[str, Any], message: str) -> None:
    async def body() -> None:
        for cls in (aiokafka.AIOKafkaProducer, AIOKafkaProducer):
            with pytest.raises(ValueError, match=re.escape(message)):
                cls(bootstrap_servers="127.0.0.1:1", **configs)

    _run(body)


def test_made_outside_a_loop_or_with_one_as_aiokafka() -> None:
    for cls in (aiokafka.AIOKafkaProducer, AIOKafkaProducer):
        # (aiokafka's text depends on the thread's event loop state; the class does not)
        with pytest.raises(RuntimeError, match=r"event loop|async function"):
            cls(bootstrap_servers="127.0.0.1:1")

    async def body() -> None:
        for cls in (aiokafka.AIOKafkaProducer, AIOKafkaProducer):
            with pytest.warns(DeprecationWarning, match="`loop` parameter has been deprecated"):
                made = cls(bootstrap_servers="127.0.0.1:1", loop=asyncio.get_running_loop())
            await made.stop()
            with pytest.warns(DeprecationWarning, match="`api_version` parameter"):
                made = cls(bootstrap_servers="127.0.0.1:1", api_version="2.0.0")
            await made.stop()

    _run(body)


def test_a_topic_the_broker_does_not_have_is_unknown(pool_name: str) -> None:

    async def body(bootstrap: str) -> None:
        mine = AIOKafkaProducer(bootstrap_servers=bootstrap, pool=pool_name,
                                request_timeout_ms=500)  # fmt: skip
        theirs = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=500)
        for producer in (theirs, mine):
            await producer.start()
            with pytest.raises(aiokafka.errors.UnknownTopicOrPartitionError):
                await producer.send("no-such-topic", b"v")
            await producer.stop()

    with BrokerStub(nodes=1, auto_create_topics=False) as stub:
        _run(lambda: body(stub.bootstrap))


def test_keyed_and_keyless_sends_without_a_partition_land_as_aiokafkas(
    tansu: Peer, pool_name: str, topic: str
) -> None:
    """The common record (bytes, no partition, timestamp or headers) takes the C append: its
    keyed records go where aiokafka's default partitioner puts them, and a keyless run's
    metadata matches what the broker stored."""
    keys = [b"key-%d" % i for i in range(30)]

    async def keyed(make: Callable[..., Any]) -> list[int]:
        async with make() as producer:
            futures = [await producer.send(topic, b"v", key=k) for k in keys]
            return [m.partition for m in await asyncio.gather(*futures)]

    theirs_maker, mine_maker = _makers(tansu, pool_name)
    assert _run(lambda: keyed(mine_maker)) == _run(lambda: keyed(theirs_maker))

    async def keyless() -> tuple[list[Any], bool, bool]:
        producer = mine_maker()
        await producer.start()
        fast = producer._fast_enabled()
        futures = [await producer.send(topic, b"n%d" % i) for i in range(500)]
        metas = [await f for f in futures]
        await producer.stop()
        with pytest.raises(aiokafka.errors.ProducerClosed):
            await producer.send(topic, b"late")
        return metas, fast, producer._fast_enabled()

    metas, fast_while_started, fast_after_stop = _run(keyless)
    assert fast_while_started and not fast_after_stop
    total = 2 * len(keys) + len(metas)
    stored = {(m.partition(), m.offset()): m.value()
              for m in consume_all(tansu, topic, list(range(PARTITIONS)), total)}  # fmt: skip
    assert len(stored) == total
    assert [stored[(m.partition, m.offset)] for m in metas] == [b"n%d" % i for i in range(500)]


def test_max_batch_size_bounds_the_pools_batches_only_when_given() -> None:
    """Not given, the pool's batches grow with their load (as KafkaProducer's) while
    create_batch keeps aiokafka's 16,384 bytes; given, it bounds both."""

    async def body() -> list[tuple[int, int]]:
        out = []
        for configs in ({}, {"max_batch_size": 4096}):
            producer = AIOKafkaProducer(**configs)
            out.append((producer._settings.pool.batch_size, producer.create_batch()._limit))
        return out

    default, given = _run(body)
    assert default == (1_000_000, 16384) and given == (4096, 4096)
    assert aiokafka.AIOKafkaProducer.__init__.__kwdefaults__["max_batch_size"] == 16384


def test_a_send_made_while_an_earlier_one_waits_for_its_topic_stays_behind_it(
    pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The earlier send waits for the topic's metadata, looking every 0.5 s; the later one
    is made once the topic is known. As aiokafka's, it lands after the earlier one (it used
    to take the C append at once, ahead: found after the soak found the same in produce())."""
    monkeypatch.setattr(topics, "metadata_poll_s", lambda elapsed: 0.5)
    topic = unique_topic("waiting")

    async def body() -> list[int]:
        async with AIOKafkaProducer(bootstrap_servers=stub.bootstrap, pool=pool_name) as p:
            first = asyncio.ensure_future(p.send(topic, b"first"))
            directory = p._handle.pool.directory
            deadline = time.monotonic() + 10
            while directory.partitions(topic) is None:
                assert time.monotonic() < deadline, "the topic never became known"
                await asyncio.sleep(0.01)
            assert not first.done()  # (still asleep: the window is open)
            second = await p.send(topic, b"second")
            return [(await future).offset for future in (await first, second)]

    with BrokerStub(nodes=1, partitions=1) as stub:
        assert _run(body) == [0, 1]
