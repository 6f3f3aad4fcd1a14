"""The transaction coordinator's requests for one node (FindCoordinator, InitProducerId
with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn), and
the group coordinator's OffsetFetch of what they committed, on the cluster's
``Coordinator``; a mixin of ``Handlers``.

Rules:
- An injected error (``Faults.fail_api``) is answered before anything is looked at.
- Every request but FindCoordinator must reach the key's coordinator node (else
  NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE); a group's coordinator is placed as a
  transactional id's is.
- OffsetFetch answers a group-level error both in the top-level error code (v2+) and on
  each partition asked for (v0–v1, which have no top-level one): a handler does not know
  the version, and a v2+ client reads the top-level code first.
"""

from __future__ import annotations

from shmkafka.broker_stub.coordinator import NO_OFFSET, CommittedOffset, Coordinator
from shmkafka.broker_stub.faults import Faults
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from shmkafka.protocol.messages.find_coordinator import Coordinator as FoundCoordinator
from shmkafka.protocol.messages.offset_fetch import (
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from shmkafka.protocol.messages.transactions import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnTopicResult,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)


class TxnHandlers:
    coordinator: Coordinator
    faults: Faults
    node: int
    host: str
    hosts: dict[int, str]
    ports: dict[int, int]

    def _findcoordinator(self, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
        keys = request.coordinator_keys or (request.key,)
        injected = self.faults.api_error(self.node, request.API_KEY)
        found = []
        for key in keys:
            node = self.coordinator.node_for(key)
            if injected or node is None:
                code = injected or ErrorCode.COORDINATOR_NOT_AVAILABLE
                found.append(FoundCoordinator(key, -1, "", -1, code, None))
            else:
                found.append(
                    FoundCoordinator(
                        key, node, self.hosts.get(node, self.host), self.ports[node], 0, None
                    )
                )
        first = found[0]
        return FindCoordinatorResponse(
            0, first.error_code, None, first.node_id, first.host, first.port, tuple(found)
        )

    def _transactional_init(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        assert request.transactional_id is not None
        code = self._refused(request.API_KEY, request.transactional_id)
        if code:
            return InitProducerIdResponse(0, code, -1, -1)
        code, producer_id, epoch = self.coordinator.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms
        )
        return InitProducerIdResponse(0, code, producer_id, epoch)

    def _addpartitionstotxn(self, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
        wanted = [(t.name, p) for t in request.topics for p in t.partitions]
        code = self._refused(request.API_KEY, request.transactional_id) or (
            self.coordinator.add_partitions(
                request.transactional_id, request.producer_id, request.producer_epoch, wanted
            )
        )
        return AddPartitionsToTxnResponse(0, tuple(
            AddPartitionsToTxnTopicResult(t.name, tuple(
                AddPartitionsToTxnPartitionResult(p, code) for p in t.partitions))
            for t in request.topics
        ))  # fmt: skip

    def _addoffsetstotxn(self, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
        code = self._refused(request.API_KEY, request.transactional_id) or (
            self.coordinator.add_offsets(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.group_id,
            )
        )
        return AddOffsetsToTxnResponse(0, code)

    def _txnoffsetcommit(self, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
        offsets = {
            (t.name, p.partition_index): CommittedOffset(
                p.committed_offset, p.committed_leader_epoch, p.committed_metadata or ""
            )
            for t in request.topics
            for p in t.partitions
        }
        code = self._refused(request.API_KEY, request.group_id) or (
            self.coordinator.txn_offset_commit(
                request.transactional_id, request.producer_id, request.producer_epoch,
                request.group_id, offsets,
            )
        )  # fmt: skip
        return TxnOffsetCommitResponse(0, tuple(
            TxnOffsetCommitResponseTopic(t.name, tuple(
                TxnOffsetCommitResponsePartition(p.partition_index, code) for p in t.partitions))
            for t in request.topics
        ))  # fmt: skip

    def _endtxn(self, request: EndTxnRequest) -> EndTxnResponse:
        code = self._refused(request.API_KEY, request.transactional_id) or (
            self.coordinator.end_txn(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
            )
        )
        return EndTxnResponse(0, code)

    def _offsetfetch(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        wanted = None if request.topics is None else [
            (t.name, p) for t in request.topics for p in t.partition_indexes
        ]  # fmt: skip
        code = self._refused(request.API_KEY, request.group_id)
        if code:
            answers = [(tp, NO_OFFSET, code) for tp in wanted or ()]
        else:
            answers = self.coordinator.fetch_offsets(
                request.group_id, wanted, request.require_stable
            )
        by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
        for (topic, index), committed, error in answers:
            by_topic.setdefault(topic, []).append(OffsetFetchResponsePartition(
                index, committed.offset, committed.leader_epoch, committed.metadata, error
            ))  # fmt: skip
        topics = tuple(OffsetFetchResponseTopic(t, tuple(ps)) for t, ps in by_topic.items())
        return OffsetFetchResponse(0, topics, code)

    def _refused(self, api_key: int, key: str) -> int:
        """An injected error, or the placement error of a request that is not for us."""
        return self.faults.api_error(self.node, api_key) or self.coordinator.check_node(
            key, self.node
        )
