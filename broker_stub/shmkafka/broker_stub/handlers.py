"""Request → response for one node, on the cluster state: sans-IO (the server awaits what a
handler says must be waited for: acks=all replication, a Fetch's max_wait).

Rules:
- A request for a partition this node does not lead gets NOT_LEADER_OR_FOLLOWER; an unknown
  topic gets UNKNOWN_TOPIC_OR_PARTITION (after auto-creating it when that is on).
- A Produce appends each partition's batches only after all of them validated; a duplicate
  idempotent batch answers DUPLICATE_SEQUENCE_NUMBER's success form (the first base offset).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from shmkafka.broker_stub.cluster import NO_LEADER, Cluster, Partition
from shmkafka.broker_stub.coordinator import Coordinator
from shmkafka.broker_stub.faults import Faults
from shmkafka.broker_stub.txn_handlers import TxnHandlers
from shmkafka.broker_stub.validate import check_sequence, split_batches
from shmkafka.protocol.clock import wall_ms
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    EndTxnRequest,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetFetchRequest,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    TxnOffsetCommitRequest,
)
from shmkafka.protocol.messages.api_versions import ApiVersion
from shmkafka.protocol.messages.create_topics import CreatableTopicResult
from shmkafka.protocol.messages.delete_topics import DeletableTopicResult
from shmkafka.protocol.messages.fetch import (
    AbortedTransaction,
    FetchableTopicResponse,
    PartitionData,
)
from shmkafka.protocol.messages.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsTopicResponse,
)
from shmkafka.protocol.messages.metadata import (
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from shmkafka.protocol.messages.produce import PartitionProduceResponse, TopicProduceResponse
from shmkafka.protocol.schema import Message

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
READ_COMMITTED = 1  # a Fetch's isolation_level
# What the stub serves: (api key, lowest, highest version). The SASL keys are answered by
# the connection's SaslSession (auth.py), on every listener, as Kafka advertises them.
SUPPORTED = (
    (ProduceRequest, 3, 9), (FetchRequest, 4, 12), (ListOffsetsRequest, 1, 7),
    (MetadataRequest, 1, 12), (ApiVersionsRequest, 0, 3), (CreateTopicsRequest, 2, 5),
    (DeleteTopicsRequest, 1, 6), (InitProducerIdRequest, 0, 4), (SaslHandshakeRequest, 0, 1),
    (SaslAuthenticateRequest, 0, 2), (FindCoordinatorRequest, 0, 4),
    (AddPartitionsToTxnRequest, 0, 3), (AddOffsetsToTxnRequest, 0, 3), (EndTxnRequest, 0, 3),
    (TxnOffsetCommitRequest, 0, 3), (OffsetFetchRequest, 0, 7),
)  # fmt: skip


_RANGES = {cls.API_KEY: (lo, hi) for cls, lo, hi in SUPPORTED}


def supported(api_key: int, version: int) -> bool:
    lo, hi = _RANGES.get(api_key, (0, -1))
    return lo <= version <= hi


def api_keys() -> tuple[ApiVersion, ...]:
    return tuple(ApiVersion(key, lo, hi) for key, (lo, hi) in sorted(_RANGES.items()))


@dataclass
class PendingAck:
    """acks=all: the response may leave once every partition's HW covers its batches."""

    response: ProduceResponse
    waits: list[tuple[Partition, int, int]]  # (partition, last offset, leader epoch)
    timeout_ms: int = 30_000


class Handlers(TxnHandlers):
    def __init__(
        self, cluster: Cluster, faults: Faults, node: int, host: str, ports: dict[int, int],
        coordinator: Coordinator | None = None,
    ) -> None:  # fmt: skip
        self.cluster = cluster
        self.coordinator = coordinator or Coordinator(cluster)
        self.faults = faults
        self.node = node
        self.host = host
        self.hosts: dict[int, str] = {}  # node id → its own address (else ``host``)
        self.ports = ports  # node id → port
        self.errors_sent: Counter[int] = Counter()  # produce error codes answered, by code
        self.touched: set[Partition] = set()  # partitions the last Produce appended to

    def handle(self, request: Message) -> Message | PendingAck:
        name = type(request).__name__
        handler = getattr(self, "_" + name.removesuffix("Request").lower())
        result: Message | PendingAck = handler(request)
        return result

    # ------------------------------------------------------------------ metadata

    def _apiversions(self, request: ApiVersionsRequest) -> ApiVersionsResponse:
        return ApiVersionsResponse(error_code=0, api_keys=api_keys())

    def _metadata(self, request: MetadataRequest) -> MetadataResponse:
        if request.topics is None:
            names = list(self.cluster.topics)
        else:
            names = [t.name for t in request.topics if t.name]
        topics = []
        for name in names:
            if (
                name not in self.cluster.topics
                and self.cluster.config.auto_create_topics
                and (request.allow_auto_topic_creation)
            ):
                self.cluster.create_topic(name)
            parts = self.cluster.topics.get(name)
            if parts is None:
                topics.append(
                    MetadataResponseTopic(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name, partitions=())
                )
                continue
            topics.append(MetadataResponseTopic(ErrorCode.NONE, name, partitions=tuple(
                MetadataResponsePartition(
                    ErrorCode.LEADER_NOT_AVAILABLE if p.leader == NO_LEADER else ErrorCode.NONE,
                    p.index, p.leader, p.leader_epoch,
                    tuple(p.replicas), tuple(r for r in p.isr if r in self.cluster.live),
                    tuple(r for r in p.replicas if r not in self.cluster.live),
                )
                for p in parts
            )))  # fmt: skip
        brokers = tuple(
            MetadataResponseBroker(n, self.hosts.get(n, self.host), self.ports[n])
            for n in self.cluster.node_ids
            if n in self.cluster.live
        )
        controller = min(self.cluster.live) if self.cluster.live else -1
        return MetadataResponse(brokers=brokers, cluster_id="broker-stub",
                                controller_id=controller, topics=tuple(topics))  # fmt: skip

    def _createtopics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        results = []
        for topic in request.topics:
            code = 0 if request.validate_only else self.cluster.create_topic(
                topic.name, topic.num_partitions, topic.replication_factor
            )  # fmt: skip
            results.append(CreatableTopicResult(topic.name, code))
        return CreateTopicsResponse(topics=tuple(results))

    def _deletetopics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        # v1–v5 name the topics in topic_names, v6 in topics (by name, or by an id: the
        # stub gives its topics none, so an id alone is never known)
        results = [DeletableTopicResult(name, error_code=self.cluster.delete_topic(name))
                   for name in request.topic_names]  # fmt: skip
        for topic in request.topics:
            if topic.name is None:
                results.append(DeletableTopicResult(
                    None, topic.topic_id, ErrorCode.UNKNOWN_TOPIC_ID
                ))  # fmt: skip
            else:
                results.append(DeletableTopicResult(
                    topic.name, topic.topic_id, self.cluster.delete_topic(topic.name)
                ))  # fmt: skip
        return DeleteTopicsResponse(responses=tuple(results))

    def _initproducerid(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        if request.transactional_id is not None:
            return self._transactional_init(request)
        if request.producer_id >= 0:  # KIP-360: the same id with the epoch bumped
            return InitProducerIdResponse(0, 0, request.producer_id, request.producer_epoch + 1)
        return InitProducerIdResponse(0, 0, self.cluster.new_producer_id(), 0)

    # ------------------------------------------------------------------ produce

    def _produce(self, request: ProduceRequest) -> ProduceResponse | PendingAck:
        self.touched = set()
        if request.acks not in (-1, 0, 1):
            return self._produce_error(request, ErrorCode.INVALID_REQUIRED_ACKS)
        waits: list[tuple[Partition, int, int]] = []
        topics = []
        for topic in request.topic_data:
            answers = []
            for data in topic.partition_data:
                records = data.records  # (decoded from the wire: one blob, never parts)
                assert not isinstance(records, tuple)
                answer, wait = self._produce_partition(
                    topic.name, data.index, records, request.acks
                )
                if answer.error_code:
                    self.errors_sent[answer.error_code] += 1
                answers.append(answer)
                if wait is not None:
                    waits.append(wait)
            topics.append(TopicProduceResponse(topic.name, tuple(answers)))
        response = ProduceResponse(responses=tuple(topics))
        if waits and not all(self.cluster.acked(p, last) for p, last, _ in waits):
            return PendingAck(response, waits, request.timeout_ms)
        return response

    def _produce_partition(
        self, topic: str, index: int, records: bytes | memoryview | None, acks: int
    ) -> tuple[PartitionProduceResponse, tuple[Partition, int, int] | None]:
        p = self.cluster.partition(topic, index)
        if (
            p is None
            and topic not in self.cluster.topics
            and self.cluster.config.auto_create_topics
        ):
            self.cluster.create_topic(topic)
            p = self.cluster.partition(topic, index)
        if p is None:
            return PartitionProduceResponse(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1), None
        if p.leader != self.node:
            return PartitionProduceResponse(index, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1), None
        injected = self.faults.produce_error(self.node, topic, index)
        if injected:
            return PartitionProduceResponse(index, injected, -1), None
        if (
            acks == -1
            and len([r for r in p.isr if r in self.cluster.live])
            < self.cluster.config.min_insync_replicas
        ):
            return PartitionProduceResponse(index, ErrorCode.NOT_ENOUGH_REPLICAS, -1), None
        if records is not None and len(records) > self.cluster.config.max_message_bytes:
            return PartitionProduceResponse(index, ErrorCode.MESSAGE_TOO_LARGE, -1), None
        batches = split_batches(None if records is None else bytes(records))
        if isinstance(batches, int):
            return PartitionProduceResponse(index, batches, -1), None
        log = p.leader_log
        first_offset = -1
        append_time = wall_ms() if topic in self.cluster.config.log_append_time_topics else None
        for header, data in batches:
            code, duplicate_at = check_sequence(log, header)
            if code == 0:
                code = self.coordinator.check_append(topic, index, header)
            if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                first_offset = duplicate_at if first_offset < 0 else first_offset
                continue
            if code:
                return PartitionProduceResponse(
                    index, code, -1, log_start_offset=log.log_start
                ), None
            stored = log.append_as_leader(data, header, p.leader_epoch, append_time)
            self.coordinator.appended(topic, index, header, stored.base_offset)
            producer = None
            if header.producer_id >= 0:
                last_seq = header.base_sequence + header.last_offset_delta
                producer = (
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    last_seq,
                )
            self.cluster.record_append(p, stored, producer, wall_ms())
            self.touched.add(p)
            first_offset = stored.base_offset if first_offset < 0 else first_offset
        if self.cluster.config.replication_lag_ms == 0:
            self.cluster.replicate_partition(p, wall_ms())
        answer = PartitionProduceResponse(
            index, 0, first_offset, log_append_time_ms=append_time if append_time else -1,
            log_start_offset=log.log_start,
        )  # fmt: skip
        return answer, ((p, log.leo - 1, p.leader_epoch) if acks == -1 else None)

    def _produce_error(self, request: ProduceRequest, code: int) -> ProduceResponse:
        return ProduceResponse(responses=tuple(
            TopicProduceResponse(t.name, tuple(
                PartitionProduceResponse(d.index, code, -1) for d in t.partition_data
            ))
            for t in request.topic_data
        ))  # fmt: skip

    # ------------------------------------------------------------------ fetch, offsets

    def _fetch(self, request: FetchRequest) -> FetchResponse:
        topics = []
        for topic in request.topics:
            parts = []
            for fp in topic.partitions:
                p = self.cluster.partition(topic.topic, fp.partition)
                if p is None:
                    parts.append(
                        PartitionData(fp.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
                    )
                    continue
                if p.leader != self.node:
                    parts.append(PartitionData(fp.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1))
                    continue
                log = p.leader_log
                if not log.log_start <= fp.fetch_offset <= log.hw:
                    parts.append(PartitionData(fp.partition, ErrorCode.OFFSET_OUT_OF_RANGE, log.hw,
                                               log.hw, log.log_start))  # fmt: skip
                    continue
                stable = self.coordinator.last_stable_offset(topic.topic, fp.partition, log.hw)
                committed = request.isolation_level == READ_COMMITTED
                end = stable if committed else log.hw
                data = log.read(fp.fetch_offset, fp.partition_max_bytes, end)
                aborted = tuple(
                    AbortedTransaction(pid, first) for pid, first in
                    self.coordinator.aborted_in(topic.topic, fp.partition, fp.fetch_offset, end)
                ) if committed else ()  # fmt: skip
                parts.append(PartitionData(fp.partition, 0, log.hw, stable, log.log_start,
                                           aborted_transactions=aborted, records=data))  # fmt: skip
            topics.append(FetchableTopicResponse(topic.topic, tuple(parts)))
        return FetchResponse(responses=tuple(topics))

    def _listoffsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        topics = []
        for topic in request.topics:
            parts = []
            for lp in topic.partitions:
                p = self.cluster.partition(topic.name, lp.partition_index)
                if p is None or p.leader != self.node:
                    code = (
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        if p is None
                        else ErrorCode.NOT_LEADER_OR_FOLLOWER
                    )
                    parts.append(ListOffsetsPartitionResponse(lp.partition_index, code))
                    continue
                log = p.leader_log
                if lp.timestamp == EARLIEST:
                    offset = log.log_start
                elif lp.timestamp in (LATEST, MAX_TIMESTAMP):
                    offset = log.hw
                else:
                    offset = min(log.offset_for_timestamp(lp.timestamp), log.hw)
                parts.append(ListOffsetsPartitionResponse(
                    lp.partition_index, 0, -1, offset, p.leader_epoch
                ))  # fmt: skip
            topics.append(ListOffsetsTopicResponse(topic.name, tuple(parts)))
        return ListOffsetsResponse(topics=tuple(topics))

    def has_data(self, request: FetchRequest) -> bool:
        """A Fetch may answer before max_wait_ms: some partition has data past its offset."""
        for topic in request.topics:
            for fp in topic.partitions:
                p = self.cluster.partition(topic.topic, fp.partition)
                if p is None or p.leader != self.node or p.leader_log.hw > fp.fetch_offset:
                    return True
        return False
