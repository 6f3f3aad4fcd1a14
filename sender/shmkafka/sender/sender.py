"""The Sender: turns the shared accumulator into produce requests, one per node, and the
responses into completions in the appending processes' rings.

``run_once(now_ms)`` reads as the recipe: metadata → producer id → damaged-batch sweep →
ready → drain → expire → send → poll/complete. The transport (``network``) and the clock are
injected, so tests run the Sender on an in-memory broker and step the clock.

Rules:
- The Sender is the only process that drains, sends, completes and frees batches.
- Idempotence (sequences, batches in flight, what an error means for them) is
  idempotence.py's: a batch takes its sequence when it is first sent and keeps it across
  retries, splits and a Sender restart (re-sent batches are de-duplicated by the broker).
- A retried batch goes back to the front of its deque in sequence order and is sent again
  only when no other batch of its partition is in flight, which keeps order.
- Completion codes: Kafka's error codes, 0 for success; the local ``DELIVERY_TIMEOUT`` when
  ``delivery.timeout.ms`` passed first, ``CORRUPT_DESCRIPTOR`` for a damaged batch (rings.py).
- Every request carries its response handler (``ClientResponse.complete``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from shmkafka.pool.accumulator import DrainedBatch, RecordAccumulator
from shmkafka.pool.config import SenderConfig
from shmkafka.pool.fastpath import full_fence
from shmkafka.pool.finishing import Acked, Finished, finish_sent
from shmkafka.pool.ready import CompressionRatio, Drainer, ReadyContext, ready
from shmkafka.pool.sealing import Sealer, Topic, row
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.broker_errors import for_code
from shmkafka.protocol.clock import Clock, SystemClock, wall_ms
from shmkafka.protocol.compression import CompressionType
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataResponse,
    ProduceRequest,
)
from shmkafka.protocol.messages.produce import SealedProduceRequest, request_head, topic_prefix
from shmkafka.protocol.records import HEADER_SIZE, BatchMeta, BatchParts
from shmkafka.sender.authentication import SaslSettings
from shmkafka.sender.compressors import Compressors
from shmkafka.sender.connection import ClientResponse, Network, NetworkClient
from shmkafka.sender.idempotence import Idempotence
from shmkafka.sender.idle import IdleTopics
from shmkafka.sender.integrity import quarantine_damaged
from shmkafka.sender.metadata import Metadata
from shmkafka.sender.responses import ProduceResponses
from shmkafka.sender.tls import client_context
from shmkafka.sender.tokens import given_credentials, token_source
from shmkafka.sender.transactions import Transactions
from shmkafka.shm import faultpoints
from shmkafka.shm.events import AUTHENTICATION, SSL
from shmkafka.shm.rings import (
    CORRUPT_DESCRIPTOR,
    DELIVERY_TIMEOUT,
    SSL_HANDSHAKE_FAILED,
    Completion,
    SenderView,
)
from shmkafka.shm.sender_counters import SenderCounters

log = logging.getLogger("shmkafka.sender")

CLOCK_SKEW_MS = 60_000  # a batch time further ahead than this is corrupt
QUARANTINE_INTERVAL_MS = 100  # how often damaged deques are looked for
MAX_POLL_MS = 100
BROKER_STATS_MS = 100  # how often the per-broker counters are published (statistics)
QUEUE_FULL = -184  # librdkafka's _QUEUE_FULL: the event of a topic a pool limit refused


@dataclass
class _Pending:
    """A completion that found a ring full; posted again on the next round."""

    batch: DrainedBatch
    completion: Completion
    slots: list[int] = field(default_factory=list)


class Sender:
    def __init__(
        self,
        pool: SharedPool,
        config: SenderConfig,
        *,
        network: Network | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.pool = pool
        self.config = config
        self.clock = clock or SystemClock()
        self.accumulator = RecordAccumulator(pool, fast_path=False, c_drain=True)
        self.network: Network = network or NetworkClient(
            config.client_id,
            max_in_flight=config.max_in_flight_requests_per_connection,
            request_timeout_ms=config.request_timeout_ms,
            reconnect_backoff_ms=config.reconnect_backoff_ms,
            reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
            ssl_context=client_context(config) if config.tls else None,
            sasl=self._sasl_settings(pool, config) if config.sasl else None,
            security_protocol=config.security_protocol,
        )
        self.metadata = Metadata(pool, config.metadata_max_age_ms, config.retry_backoff_ms)
        self.drainer = Drainer()
        self.compression_ratio = CompressionRatio()
        self.compressors = Compressors()
        fast = self.accumulator.drain_fast
        self.finisher: Callable[[list[Acked], int, int, int, int], Finished] = (
            partial(finish_sent, pool) if fast is None else fast.finish_sent
        )
        self.sealer = Sealer(pool, fast, config.compression,
                             config.compression_level)  # fmt: skip
        self.stats = SenderCounters()
        self.idempotence = Idempotence(
            pool, self.accumulator, config, transactional=config.transactional_id is not None
        )
        self._pending: list[_Pending] = []
        self._to_free: list[DrainedBatch] = []  # finished, freed after a commit (durable)
        self._next_quarantine_ms = self._next_broker_stats_ms = self._requests_published = 0
        self._init_pid_in_flight = False
        self._bootstrap = [
            (-1 - i, host, port) for i, (host, port) in enumerate(config.bootstrap_addresses())
        ]
        self.network.on_event = self._on_connection_error
        self.network.set_nodes(self._bootstrap)
        if (leaked := pool.reclaim_unowned()) > 0:
            log.info("reclaimed %d slabs a killed Sender left unowned", leaked)
        self.idle = IdleTopics(pool, config.metadata_max_idle_ms, self.clock.monotonic_ms())
        self.idempotence.resume()
        self._new_batches_seen = pool.new_batches()
        self.txn = Transactions(self) if config.transactional_id is not None else None
        self.responses = ProduceResponses(self)
        pool.set_sender_linger(config.linger_ms)
        self.accumulator.wakes.hold_for(config.linger_ms)
        pool.set_sender_wake_at(0)

    # ------------------------------------------------------------------ the recipe

    def run_once(self, now_ms: int) -> int:
        """One round; returns how long the caller may wait before the next (ms)."""
        self._new_batches_seen = self.pool.new_batches()  # before we look at the deques
        self._maybe_update_metadata(now_ms)
        if self.txn is not None:
            self.txn.poll(now_ms)
        if self.idle.sequences_forgotten():  # (a new producer id: see idle.py)
            if self.txn is not None:
                self.txn.sequences_lost()  # (a new epoch, once no transaction is open)
            else:
                self.idempotence.request_reset()
        if self.idempotence.reset_due() or not self._producer_id_ready(now_ms):
            # (no producer id yet, the cluster unreachable: records still expire in time)
            self._post_pending()
            self._expire(self.accumulator.partition_states(), now_ms)
            return self._poll(min(MAX_POLL_MS, self.config.retry_backoff_ms), now_ms)
        self._post_pending()
        self._sweep_damaged(now_ms)
        states = self._drop_corrupt_heads(self.accumulator.partition_states(), now_ms)
        ctx = self._ready_context()
        result = ready(states, self.metadata.brokers, ctx, now_ms, self._muted)
        if result.unknown_leader_topics:
            self.metadata.add_topics(set(result.unknown_leader_topics))
            self.metadata.request_update()
        nodes = [n for n in result.ready_nodes if self.network.ready(n, now_ms)]
        sendable = [s for s in states if s.deque_id in result.sendable]
        drained = self.drainer.drain(
            self.accumulator, sendable, nodes, self.config.max_request_size, now_ms, ctx,
            self._can_drain, result.along,
        )  # fmt: skip
        self._expire(states, now_ms)
        self.idle.used((s.topic for s in states), now_ms)
        self.idle.sweep(now_ms, self.metadata.forget)
        for node, batches in drained.items():
            faultpoints.reached("sender.after_drain")
            self._send_produce(node, batches, now_ms)
        if self.txn is not None:  # (after the sends: drained batches count as in flight)
            self.txn.send_requests(now_ms)  # AddPartitionsToTxn for what ready() found
        timeout = 0 if drained else min(result.next_ready_check_delay_ms, MAX_POLL_MS)
        return self._poll(timeout, now_ms)

    def _sweep_damaged(self, now_ms: int) -> None:
        """Fail the batches of damaged deques (it reads every ring: not every round)."""
        if now_ms < self._next_quarantine_ms:
            return
        self._next_quarantine_ms = now_ms + QUARANTINE_INTERVAL_MS
        for batch, problem in quarantine_damaged(self.accumulator):
            self._fail_corrupt(batch, problem)

    def _publish_stats(self, now_ms: int) -> None:
        # Every table write is 5 KiB: not each round, but also when the last response of a
        # burst came in (an idle Sender may sleep long: the table would lag behind).
        burst_over = (
            self.stats.produce_requests != self._requests_published
            and not self.network.in_flight_count()
        )
        if now_ms >= self._next_broker_stats_ms or burst_over:
            self._next_broker_stats_ms = now_ms + BROKER_STATS_MS
            self._requests_published = self.stats.produce_requests
            self.pool.brokers.publish(self.network.node_stats(now_ms))
        self.stats.bytes_sent = self.network.bytes_sent
        self.stats.publish(self.pool.segment)

    @staticmethod
    def _sasl_settings(pool: SharedPool, config: SenderConfig) -> SaslSettings:
        tokens = token_source(config, pool) if config.sasl_mechanism == "OAUTHBEARER" else None
        return SaslSettings(config.sasl_mechanism, config.sasl_username, config.sasl_password,
                            tokens, given_credentials(pool))  # fmt: skip

    def publish_error(self, code: int, text: str) -> None:
        """An error every producer's app hears of (``error_cb``, its log): a librdkafka
        code, or a broker error code."""
        log.debug("event %d: %s", code, text)
        self.pool.events.publish(code, text, wall_ms=wall_ms())

    def _on_connection_error(self, code: int, text: str) -> None:
        """The network's report of a failed connection. A refused authentication or TLS
        handshake, while no other broker connection is up, also fails every queued batch
        at once when ``refused_login_fails_records`` (kafka-python's and aiokafka's way):
        the apps learn it from their futures in seconds, not at delivery.timeout.ms.
        Otherwise (librdkafka's way) the batches wait: the next login may work
        (``set_sasl_credentials``), and they are expired at delivery.timeout.ms."""
        self.publish_error(code, text)
        if (
            code not in (AUTHENTICATION, SSL)
            or not self.config.refused_login_fails_records
            or self.network.connected()
        ):
            return
        failure = ErrorCode.SASL_AUTHENTICATION_FAILED if code == AUTHENTICATION else (
            SSL_HANDSHAKE_FAILED)  # fmt: skip
        for batch in self.accumulator.expire(self.clock.monotonic_ms(), -1):
            self.stats.errors += 1
            self.finish(batch, -1, failure, -1, -1)

    def busy(self) -> bool:
        """Anything queued, in flight or waiting to be posted."""
        return bool(
            self._pending or self.idempotence.any_in_flight()
            or self.accumulator.partition_states()
            or (self.txn is not None and self.txn.busy())
        )  # fmt: skip

    def close(self) -> None:
        self.accumulator.wakes.wake_all()
        self.compressors.close()
        self.network.close()
        self.accumulator.close()

    # ------------------------------------------------------------------ metadata, pid

    def any_node(self, now_ms: int) -> int | None:
        nodes = list(self.metadata.brokers) or [n for n, _, _ in self._bootstrap]
        for node in sorted(nodes, key=self.network.in_flight_count):
            if self.network.ready(node, now_ms):
                return node
        return None

    def _maybe_update_metadata(self, now_ms: int) -> None:
        self.metadata.poll_topic_requests()
        if not self.metadata.due(now_ms):
            return
        node = self.any_node(now_ms)
        if node is None:
            return
        self.network.send(node, self.metadata.request(now_ms), self._on_metadata, now_ms)

    def _producer_id_ready(self, now_ms: int) -> bool:
        if self.txn is not None:
            return self.txn.producer_ready()
        if not self.config.enable_idempotence or self.pool.producer_identity()[0] >= 0:
            return True
        if not self._init_pid_in_flight:
            node = self.any_node(now_ms)
            if node is not None:
                request = InitProducerIdRequest(transaction_timeout_ms=60_000)
                self.network.send(node, request, self._on_init_pid, now_ms)
                self._init_pid_in_flight = True
        return False

    # ------------------------------------------------------------------ ready / drain

    def _ready_context(self) -> ReadyContext:
        return ReadyContext(
            linger_ms=self.config.linger_ms,
            retry_backoff_ms=self.config.retry_backoff_ms,
            retry_backoff_max_ms=self.config.retry_backoff_max_ms,
            exhausted=self.pool.buffers.waiters() > 0,
            flushing=self.pool.slots.flushing() or (self.txn is not None and self.txn.flushing()),
            compression_ratio=self.compression_ratio.estimate,
        )

    def _muted(self, state: Any) -> bool:
        return not self._can_drain(state)

    def _can_drain(self, state: Any) -> bool:
        if self.txn is not None and not self.txn.can_drain(state.topic, state.partition):
            return False
        return self.idempotence.can_send(state.deque_id, state.attempts, state.leader)

    # ------------------------------------------------------------------ send

    def _send_produce(self, node: int, batches: list[DrainedBatch], now_ms: int) -> None:
        committer = self.pool.committer
        flexible = self.network.version_for(node, ProduceRequest) >= ProduceRequest.FLEXIBLE_FROM
        if committer is None:
            request, encoded = self._encode(node, batches, flexible)
        else:  # (a durable pool: the sequences are on the disk before the request leaves)
            with committer.held():
                request, encoded = self._encode(node, batches, flexible)
                committer.commit_held()
        if request is None:
            return  # (every batch was corrupt: failed already)
        refreshed = [self.accumulator.refresh(b) for b in encoded]  # (what the request holds)
        handler = partial(self.responses.on_produce, refreshed)
        self.network.send(
            node, request, handler, now_ms, expect_response=self.config.acks != 0
        )  # written at once when the socket takes it
        faultpoints.reached("sender.after_send")
        self.stats.produce_requests += 1

    def _encode(
        self, node: int, batches: list[DrainedBatch], flexible: bool
    ) -> tuple[SealedProduceRequest | None, list[DrainedBatch]]:
        """The request of the sound batches (a corrupt one is failed here, and never
        counted in flight), sealed in one call (sealing.py: each batch's sequence to shm
        first, then its header and records); and those batches, in the request's order."""
        producer = self.pool.producer_identity()
        sound: list[DrainedBatch] = []
        used = self.pool.deques_used()
        for batch in batches:
            problem = self.pool.batches.problem(batch.info, used, HEADER_SIZE)
            if problem is not None:
                self._fail_corrupt(batch, problem)
            else:
                sound.append(batch)
        if not sound:
            return None, []
        compressed = self._compress_ahead(sound)
        by_topic: dict[str, list[tuple[DrainedBatch, BatchMeta]]] = defaultdict(list)
        for batch in sound:
            by_topic[batch.topic].append((batch, self.idempotence.meta(batch, producer)))
        config = self.config
        head = request_head(config.transactional_id, config.acks, config.request_timeout_ms,
                            len(by_topic), flexible)  # fmt: skip
        topics: list[Topic] = [
            (topic_prefix(topic, len(sealed), flexible),
             [row(batch, meta, compressed.get(batch.batch_id)) for batch, meta in sealed])
            for topic, sealed in by_topic.items()
        ]  # fmt: skip
        pieces, sizes = self.sealer.seal(
            flexible, head, topics, config.compression_level, self.compressors.map
        )
        sealed_in_order = [entry for sealed in by_topic.values() for entry in sealed]
        for (batch, meta), size in zip(sealed_in_order, sizes, strict=True):
            self.stats.batch_bytes += size
            self.compression_ratio.observe(batch.info.write_pos, size)
            self.idempotence.sent(batch, meta, node)
            self.stats.batches_sent += 1
            self.stats.records_sent += batch.info.record_count
        encoded = [batch for batch, _ in sealed_in_order]
        return SealedProduceRequest(flexible, tuple(pieces)), encoded

    def _compress_ahead(self, sound: list[DrainedBatch]) -> dict[int, BatchParts]:
        """With compression threads, the records of the request's sound batches (checked
        by the caller), compressed at once: the pieces of all of them side by side
        (compressors.py; pure reads, so no write to shared memory moves). Without, each
        batch is compressed as it is sealed."""
        codec = self.config.compression
        if codec == CompressionType.NONE or self.compressors.workers == 0:
            return {}
        payloads = self.compressors.compress_all(
            codec, self.config.compression_level, [self.accumulator.records(b) for b in sound]
        )
        return {batch.batch_id: payload for batch, payload in zip(sound, payloads, strict=True)}

    # ------------------------------------------------------------------ responses

    def _complete(self, batch: DrainedBatch) -> None:
        """Free a finished batch; in a durable pool, after a commit records it DONE
        (``_free_finished``, at the end of the round), so a reused slab never makes an old
        record look pending after a power cut (durability.py)."""
        if self.pool.committer is None:
            self.accumulator.complete(batch)
        else:
            self._to_free.append(batch)

    def _free_finished(self) -> None:
        if not self._to_free or self.pool.committer is None:
            return
        finished, self._to_free = self._to_free, []
        self.pool.committer.commit((b.batch_id, b.info.generation) for b in finished)
        for batch in finished:
            self.accumulator.complete(batch)

    def _poll(self, timeout_ms: int, now_ms: int) -> int:
        wakes = self.accumulator.wakes  # (held ones are due within linger.ms: result_wakes.py)
        self.accumulator.defer_wakes(True)
        try:
            waited = self._handle_responses(min(timeout_ms, wakes.due_in_ms()), now_ms)
            self._free_finished()
            self._publish_stats(now_ms)  # before the wakes: a record's app sees it counted
            return waited
        finally:
            self.accumulator.defer_wakes(False)  # one wake per process, after all results
            wakes.wake_due()

    def _announce_sleep(self, timeout_ms: int) -> int:
        """Tell producers when we will look at the deques again by ourselves, so that they
        need not wake us for a new batch we will see within linger.ms; a batch opened since
        this round looked at the deques cancels the sleep (see layout.py, new_batches)."""
        if timeout_ms <= 0:
            return 0
        self.pool.set_sender_wake_at(self.clock.monotonic_ms() + timeout_ms)
        full_fence()
        return 0 if self.pool.new_batches() != self._new_batches_seen else timeout_ms

    def _handle_responses(self, timeout_ms: int, now_ms: int) -> int:
        responses = self.network.poll(self._announce_sleep(timeout_ms), now_ms)
        self.pool.set_sender_wake_at(0)
        for response in responses:
            response.complete(now_ms)
        return timeout_ms

    def _on_metadata(self, response: ClientResponse, now_ms: int) -> None:
        if not isinstance(response.response, MetadataResponse):
            self.metadata.failed()
            return
        before = dict(self.metadata.topic_errors)
        changed = self.metadata.on_response(response.response, now_ms)
        refused, self.metadata.refused = self.metadata.refused, []
        for refusal in refused:  # a limit of the pool: this topic fails, the rest flows
            log.warning("%s", refusal.message())
            self.publish_error(QUEUE_FULL, refusal.message())
        for topic, code in self.metadata.topic_errors.items():
            if code and code != before.get(topic) and not for_code(code).retriable:
                self.publish_error(code, f"Topic {topic}: {for_code(code).description}")
        if changed:
            nodes = [(n, h, p) for n, (h, p) in self.metadata.brokers.items()]
            self.network.set_nodes(nodes + self._bootstrap)

    def _on_init_pid(self, response: ClientResponse, now_ms: int) -> None:
        del now_ms
        self._init_pid_in_flight = False
        answer = response.response
        if isinstance(answer, InitProducerIdResponse) and answer.error_code == ErrorCode.NONE:
            self.pool.set_producer_identity(answer.producer_id, answer.producer_epoch)
            log.info("producer id %d epoch %d", answer.producer_id, answer.producer_epoch)
        else:
            log.warning("InitProducerId failed: %s", response.error or answer)
            code = getattr(answer, "error_code", ErrorCode.NONE)
            if code and not for_code(code).retriable:
                self.publish_error(code, f"Failed to acquire idempotence PID: {for_code(code)()}")

    def _expire(self, states: list[Any], now_ms: int) -> None:
        """Fail queued batches older than delivery.timeout.ms (the deques are walked only
        when the oldest first batch is that old)."""
        timeout = self.config.delivery_timeout_ms
        if not states or now_ms - min(s.created_ms for s in states) < timeout:
            return
        for batch in self.accumulator.expire(now_ms, timeout):
            self.stats.expired += 1
            self.finish(batch, -1, DELIVERY_TIMEOUT, -1, -1)

    def finish(
        self, batch: DrainedBatch, base_offset: int, code: int, append: int, start: int,
        view: SenderView | None = None,
    ) -> None:  # fmt: skip
        problem = self.pool.batches.problem(batch.info, self.pool.deques_used(), HEADER_SIZE)
        if problem is not None:  # (expiry and errors reach here without a send's check)
            self._fail_corrupt(batch, problem)
            return
        if code:
            self.stats.records_failed += batch.info.record_count
            if self.txn is not None:
                self.txn.batch_failed(batch, code)
        if self.pool.batches.recovered(batch.batch_id):
            self.pool.count_recovered_result(batch.info.record_count, failed=code != 0)
        done = self.accumulator.completion_for(batch, base_offset, code, append, start, view)
        full = self.accumulator.post_completion(batch, done)
        if full:
            self.pend(batch, done, full)
            return
        self._complete(batch)

    def pend(self, batch: DrainedBatch, completion: Completion, slots: list[int]) -> None:
        """A result some rings had no room for: posted to them again next round."""
        self._pending.append(_Pending(batch, completion, slots))

    def _drop_corrupt_heads(self, states: list[Any], now_ms: int) -> list[Any]:
        """A first batch whose times lie in the future would never be ready nor expire:
        its descriptor is corrupt, so it is drained and failed now."""
        horizon = now_ms + CLOCK_SKEW_MS
        bad = [s for s in states if s.created_ms > horizon or s.last_append_ms > horizon]
        for state in bad:
            for batch in self.accumulator.drain([state.deque_id], 1):
                self._fail_corrupt(batch, f"times in the future ({batch.info.created_ms})")
        return [s for s in states if s not in bad] if bad else states

    def _fail_corrupt(self, batch: DrainedBatch, problem: str) -> None:
        """A corrupted descriptor: its appenders get CORRUPT_DESCRIPTOR; its slabs go back
        only if the run it names is its own (``complete``)."""
        log.error("batch %d has a corrupt descriptor (%s): failing it", batch.batch_id, problem)
        self.stats.errors += 1
        self.stats.records_failed += batch.info.record_count
        # Addressed by the batch itself (its parent fields may be garbage too), and to every
        # attached process (its appender set may be garbage): others ignore it.
        done = Completion(batch.batch_id, batch.info.generation, -1, -1, -1, CORRUPT_DESCRIPTOR)
        for slot, _, _ in self.pool.slots.active():
            if slot != self.pool.slot and self.pool.rings.post(slot, done):
                self.pool.rings.wake(slot)
        self._complete(batch)

    def _post_pending(self) -> None:
        pending, self._pending = self._pending, []
        for item in pending:
            still = [s for s in item.slots if not self.pool.rings.post(s, item.completion)]
            for slot in set(item.slots) - set(still):
                self.pool.rings.wake(slot)
            if still:
                item.slots = still
                self._pending.append(item)
            else:
                self._complete(item.batch)
