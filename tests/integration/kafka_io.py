"""Helpers shared by the integration tests: topics, produce with our codec, read back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import confluent_kafka

from shmkafka.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from shmkafka.protocol.messages.create_topics import CreatableTopic
from shmkafka.protocol.messages.fetch import FetchPartition, FetchTopic, PartitionData
from shmkafka.protocol.messages.list_offsets import ListOffsetsPartition, ListOffsetsTopic
from shmkafka.protocol.messages.metadata import MetadataRequestTopic
from shmkafka.protocol.messages.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    TopicProduceData,
)
from shmkafka.protocol.records import (
    BatchMeta,
    RecordBatch,
    build_batch,
    decode_batches,
    make_attributes,
)
from tests.peers import Peer
from tests.wire import WireClient


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class Cluster:
    """Plain-socket connections to every broker of a peer, opened lazily."""

    peer: Peer
    leaders: dict[tuple[str, int], tuple[str, int]]  # (topic, partition) → (host, port)

    def __post_init__(self) -> None:
        self._clients: dict[tuple[str, int], WireClient] = {}

    def client(self, address: tuple[str, int] | None = None) -> WireClient:
        address = address or self.peer.brokers[0]
        if address not in self._clients:
            self._clients[address] = WireClient(*address)
        return self._clients[address]

    def ensure_topic(self, topic: str, partitions: int) -> int:
        """Create (Tansu) or auto-create (mock) ``topic``; returns its partition count."""
        if self.peer.can_create_topics:
            created = self.client().call(
                CreateTopicsRequest(
                    topics=(CreatableTopic(topic, partitions, 1),), timeout_ms=10_000
                ),
                CreateTopicsResponse,
            )
            assert created.topics[0].error_code == 0, created
        deadline = time.monotonic() + 20
        while True:
            metadata = self.client().call(
                MetadataRequest(topics=(MetadataRequestTopic(name=topic),)), MetadataResponse
            )
            brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
            (found,) = metadata.topics
            if (
                found.error_code == 0
                and found.partitions
                and all(p.leader_id in brokers for p in found.partitions)
            ):
                for p in found.partitions:
                    self.leaders[(topic, p.partition_index)] = brokers[p.leader_id]
                return len(found.partitions)
            assert time.monotonic() < deadline, f"topic {topic} never got leaders: {metadata}"
            time.sleep(0.2)

    def produce(
        self, topic: str, partition: int, batch: bytes, acks: int = -1, version: int | None = None,
        transactional_id: str | None = None,
    ) -> PartitionProduceResponse:  # fmt: skip
        client = self.client(self.leaders[(topic, partition)])
        request = ProduceRequest(
            transactional_id=transactional_id,
            acks=acks,
            timeout_ms=10_000,
            topic_data=(TopicProduceData(topic, (PartitionProduceData(partition, batch),)),),
        )
        response = client.call(request, ProduceResponse, version)
        (topic_response,) = response.responses
        assert topic_response.name == topic
        (partition_response,) = topic_response.partition_responses
        assert partition_response.index == partition
        return partition_response

    def fetch(
        self, topic: str, partition: int, offset: int, version: int | None = None
    ) -> PartitionData:
        client = self.client(self.leaders[(topic, partition)])
        request = FetchRequest(
            max_wait_ms=100,
            min_bytes=1,
            topics=(FetchTopic(topic, (FetchPartition(partition, fetch_offset=offset),)),),
        )
        response = client.call(request, FetchResponse, version)
        assert response.error_code == 0, response
        (topic_response,) = response.responses
        (partition_data,) = topic_response.partitions
        assert partition_data.error_code == 0, partition_data
        return partition_data

    def list_offset(self, topic: str, partition: int, timestamp: int) -> int:
        """ListOffsets for one partition (EARLIEST_TIMESTAMP / LATEST_TIMESTAMP or a time)."""
        client = self.client(self.leaders[(topic, partition)])
        request = ListOffsetsRequest(
            topics=(
                ListOffsetsTopic(topic, (ListOffsetsPartition(partition, timestamp=timestamp),)),
            )
        )
        response = client.call(request, ListOffsetsResponse)
        (answer,) = response.topics[0].partitions
        assert answer.error_code == 0, answer
        return answer.offset

    def fetch_batches(
        self, topic: str, partition: int, end_offset: int, version: int | None = None,
        verify_crc: bool = True,
    ) -> list[RecordBatch]:  # fmt: skip
        """Fetch (and decode with our codec) every batch holding offsets below end_offset."""
        batches: list[RecordBatch] = []
        offset = 0
        deadline = time.monotonic() + 20
        while offset < end_offset:
            assert time.monotonic() < deadline, f"fetched only up to offset {offset}"
            records = self.fetch(topic, partition, offset, version).records
            for batch in decode_batches(records, verify_crc=verify_crc):
                if batch.last_offset >= offset:
                    batches.append(batch)
                    offset = batch.last_offset + 1
        return batches

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


def transactional_batch(value: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    """One record's batch of a transaction (the transactional bit, its producer's ids)."""
    meta = BatchMeta(attributes=make_attributes(transactional=True), producer_id=producer_id,
                     producer_epoch=epoch, base_sequence=sequence)  # fmt: skip
    return build_batch([(0, None, value, [])], meta)


def drive_transaction(tm: Any, c: Cluster, until: Callable[[], bool], unacked: int = 0) -> None:
    """A minimal Sender loop for a ``sender.txn_manager.TransactionManager``: send what it
    asks for, to the node it names, until ``until()``."""
    from shmkafka.protocol.messages import APIS

    metadata = c.client().call(MetadataRequest(topics=()), MetadataResponse)
    nodes = {b.node_id: (b.host, b.port) for b in metadata.brokers}
    deadline = time.monotonic() + 20
    while not until():
        assert time.monotonic() < deadline, f"stuck in {tm.state}, error {tm.error}"
        now = int(time.monotonic() * 1000)
        request = tm.next_request(now, unacked)
        if request is None:
            time.sleep(0.01)
            continue
        client = c.client(None if request.node is None else nodes[request.node])
        tm.handle(request, client.call(request.message, APIS[request.message.API_KEY][1]), now)


@contextmanager
def cluster(peer: Peer) -> Iterator[Cluster]:
    c = Cluster(peer, {})
    try:
        yield c
    finally:
        c.close()


def read_committed(bootstrap: str, topic: str, expected: int, partition: int = 0) -> list[bytes]:
    """What a read_committed confluent-kafka consumer reads of one partition: until
    ``expected`` records and then 1 s more (so that one too many shows), or 15 s."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "enable.auto.commit": False, "log_level": 3,
    })  # fmt: skip
    consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            values.append(message.value())
        if len(values) == expected:
            deadline = min(deadline, time.monotonic() + 1)
    consumer.close()
    return values


def consume_all(
    peer: Peer, topic: str, partitions: list[int], expected: int, timeout: float = 30.0
) -> list[confluent_kafka.Message]:
    """Read ``expected`` records from the start of the partitions with a confluent Consumer."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": peer.bootstrap,
            "group.id": unique_topic("readback"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in partitions
            ]
        )
        out: list[confluent_kafka.Message] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
        # Anything beyond what we produced would be a duplicate: poll briefly for extras.
        extra_deadline = time.monotonic() + 1.0
        while time.monotonic() < extra_deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
        return out
    finally:
        consumer.close()


def kafka_python_consume_all(
    peer: Peer, topic: str, partitions: list[int], expected: int, timeout: float = 30.0
) -> list[object]:
    """Read ``expected`` records from the start with kafka-python's KafkaConsumer."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=peer.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(timeout * 1000),
        api_version=peer.kafka_python_api_version,
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        out: list[object] = []
        for record in consumer:
            out.append(record)
            if len(out) >= expected:
                break
        return out
    finally:
        consumer.close()
