"""A small blocking admin client: create and delete topics. ``shmkafka perf`` and the tests
use it; the producer path does not.

    errors = create_topics("127.0.0.1:9092", [NewTopic("orders", 16, 1)], timeout_ms=10_000)
    raise_errors(errors, ignore=(TopicAlreadyExistsError,))
    delete_topics("127.0.0.1:9092", ["orders"], timeout_ms=10_000)

Rules:
- It rides on the Sender's ``NetworkClient`` (connection.py, the one module that opens
  sockets): the same connection setup, ApiVersions negotiation, and optional TLS and SASL.
- A call first asks any broker for Metadata (v1+ names the controller), then sends its
  CreateTopics / DeleteTopics to the controller, or to any broker when none is named or the
  controller cannot be reached. Topics answered NOT_CONTROLLER are asked again after a
  metadata refresh; a request whose connection broke is sent again.
- ``timeout_ms`` bounds the whole call (connecting, metadata, the request; the broker is
  given what is left of it as the request's own timeout), read on the monotonic clock.
  Nothing blocks past it: a cluster none of whose bootstrap servers could be reached raises
  ``NoBrokersAvailable`` (naming the last connection failure), one that stops answering
  ``KafkaTimeoutError``.
- Per-topic outcomes are returned, not raised: name → None, or the error of the topic's code
  (e.g. ``TopicAlreadyExistsError``), so the caller chooses what to ignore; ``raise_errors``
  raises the first one it was not told to ignore. Errors of the whole call (unreachable
  cluster, timeout, a broker without the API) are raised.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from shmkafka.pool.config import normalize_bootstrap, split_address
from shmkafka.pool.errors import KafkaTimeoutError, NoBrokersAvailable
from shmkafka.protocol.broker_errors import UnknownError, error_for
from shmkafka.protocol.clock import monotonic_ms
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import BrokerResponseError
from shmkafka.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from shmkafka.protocol.messages.create_topics import CreatableTopic, CreatableTopicConfig
from shmkafka.protocol.messages.delete_topics import DeleteTopicState
from shmkafka.protocol.schema import Message
from shmkafka.sender.authentication import SaslSettings
from shmkafka.sender.connection import ClientResponse, NetworkClient

DEFAULT_TIMEOUT_MS = 30_000
POLL_MS = 100  # the longest single wait, so the deadline is checked often
CLIENT_ID = "shmkafka-admin"

R = TypeVar("R", bound=Message)
TopicErrors = dict[str, BrokerResponseError | None]


@dataclass(frozen=True)
class NewTopic:
    """A topic to create; -1 partitions or replication factor: the broker's default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


def create_topics(
    bootstrap: str | Sequence[str],
    topics: Sequence[NewTopic],
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    validate_only: bool = False,
    ssl_context: ssl.SSLContext | None = None,
    sasl: SaslSettings | None = None,
    client_id: str = CLIENT_ID,
) -> TopicErrors:
    """Create ``topics``; returns each topic's error, None where it was created."""
    by_name = {t.name: t for t in topics}

    def request(names: list[str], broker_timeout_ms: int) -> CreateTopicsRequest:
        return CreateTopicsRequest(
            topics=tuple(
                CreatableTopic(
                    name=name,
                    num_partitions=by_name[name].num_partitions,
                    replication_factor=by_name[name].replication_factor,
                    configs=tuple(
                        CreatableTopicConfig(k, v) for k, v in by_name[name].configs.items()
                    ),
                )
                for name in names
            ),
            timeout_ms=broker_timeout_ms,
            validate_only=validate_only,
        )

    def outcomes(response: CreateTopicsResponse) -> list[tuple[str | None, int, str | None]]:
        return [(t.name, t.error_code, t.error_message) for t in response.topics]

    with AdminSession(bootstrap, timeout_ms, ssl_context, sasl, client_id) as session:
        return session.per_topic(list(by_name), request, CreateTopicsResponse, outcomes)


def delete_topics(
    bootstrap: str | Sequence[str],
    names: Sequence[str],
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ssl_context: ssl.SSLContext | None = None,
    sasl: SaslSettings | None = None,
    client_id: str = CLIENT_ID,
) -> TopicErrors:
    """Delete the topics ``names``; returns each topic's error, None where it was deleted
    (``UnknownTopicOrPartitionError`` where there was no such topic)."""

    def request(pending: list[str], broker_timeout_ms: int) -> DeleteTopicsRequest:
        # both forms: v1–v5 send topic_names, v6 topics (the negotiated version decides)
        return DeleteTopicsRequest(
            topics=tuple(DeleteTopicState(name=name) for name in pending),
            topic_names=tuple(pending),
            timeout_ms=broker_timeout_ms,
        )

    def outcomes(response: DeleteTopicsResponse) -> list[tuple[str | None, int, str | None]]:
        return [(t.name, t.error_code, t.error_message) for t in response.responses]

    with AdminSession(bootstrap, timeout_ms, ssl_context, sasl, client_id) as session:
        unique = list(dict.fromkeys(names))
        return session.per_topic(unique, request, DeleteTopicsResponse, outcomes)


def raise_errors(
    results: Mapping[str, BrokerResponseError | None],
    *,
    ignore: tuple[type[BrokerResponseError], ...] = (),
) -> None:
    """Raise the first per-topic error that is not an instance of ``ignore``."""
    for error in results.values():
        if error is not None and not isinstance(error, ignore):
            raise error


class AdminSession:
    """Connections to one cluster for the length of one call, with its deadline."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        timeout_ms: int,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslSettings | None = None,
        client_id: str = CLIENT_ID,
    ) -> None:
        servers = normalize_bootstrap(bootstrap if isinstance(bootstrap, str) else list(bootstrap))
        self.bootstrap_text = ",".join(servers)
        self.bootstrap = [(-1 - i, *split_address(s)) for i, s in enumerate(servers)]
        self.timeout_ms = timeout_ms
        self.deadline_ms = monotonic_ms() + timeout_ms
        security = ("SASL_" if sasl else "") + ("SSL" if ssl_context else "PLAINTEXT")
        self.network = NetworkClient(
            client_id, max_in_flight=1, request_timeout_ms=max(1, timeout_ms),
            ssl_context=ssl_context, sasl=sasl, security_protocol=security,
        )  # fmt: skip
        self.network.on_event = self._on_event
        self.network.set_nodes(self.bootstrap)
        self.controller: int | None = None
        self.last_failure: str | None = None
        self.connected_once = False

    def __enter__(self) -> AdminSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.network.close()

    def _on_event(self, code: int, text: str) -> None:
        del code
        self.last_failure = text

    def remaining_ms(self) -> int:
        return self.deadline_ms - monotonic_ms()

    # ------------------------------------------------------------------ calls

    def per_topic(
        self,
        names: list[str],
        build: Callable[[list[str], int], Message],
        response_cls: type[R],
        outcomes: Callable[[R], Iterable[tuple[str | None, int, str | None]]],
    ) -> TopicErrors:
        """Send ``build(pending, broker timeout)`` to the controller until no topic is
        answered NOT_CONTROLLER; each topic's error (None: done)."""
        results: TopicErrors = {}
        pending = names
        while pending:
            self.refresh_metadata()
            request = build(pending, max(0, self.remaining_ms()))
            response = self.call(request, response_cls, self.controller)
            again = []
            for name, code, message in outcomes(response):
                if name is None or name not in pending:
                    continue
                if code == ErrorCode.NOT_CONTROLLER:
                    again.append(name)
                else:
                    results[name] = error_for(code, message)
            for name in pending:
                if name not in results and name not in again:
                    results[name] = UnknownError(f"the broker did not answer for topic {name!r}")
            pending = again
            if pending:
                self._wait(POLL_MS)  # (the controller is moving: give it a moment)
        return results

    def refresh_metadata(self) -> MetadataResponse:
        """The brokers and the controller, from any broker (no topics asked for)."""
        request = MetadataRequest(topics=(), allow_auto_topic_creation=False)
        metadata = self.call(request, MetadataResponse, None)
        brokers = [(b.node_id, b.host, b.port) for b in metadata.brokers]
        self.network.set_nodes(brokers + self.bootstrap)
        known = {node_id for node_id, _, _ in brokers}
        self.controller = metadata.controller_id if metadata.controller_id in known else None
        return metadata

    def call(self, request: Message, response_cls: type[R], preferred: int | None) -> R:
        """Send ``request`` (to ``preferred`` if it can be reached) and wait for its answer;
        a request whose connection broke is sent again while time is left."""
        while True:
            answer = self._exchange(self._ready_node(preferred), request)
            if answer.error is None:
                if not isinstance(answer.response, response_cls):
                    raise UnknownError(f"expected a {response_cls.__name__}, got {answer.response}")
                return answer.response
            if not answer.error.retriable or self.remaining_ms() <= 0:
                raise answer.error
            self.last_failure = str(answer.error)

    def _exchange(self, node: int, request: Message) -> ClientResponse:
        """One request to a ready node, and its outcome (a response or a connection error)."""
        answers: list[ClientResponse] = []

        def on_answer(response: ClientResponse, now_ms: int) -> None:
            answers.append(response)

        self.network.send(node, request, on_answer, monotonic_ms())
        while not answers:
            left = self.remaining_ms()
            if left <= 0:
                raise KafkaTimeoutError(
                    f"{type(request).__name__}: node {node} did not answer within "
                    f"{self.timeout_ms} ms"
                )
            self._poll(min(POLL_MS, left))
        return answers[0]

    # ------------------------------------------------------------------ waiting

    def _ready_node(self, preferred: int | None) -> int:
        """A node a request can be sent to now: ``preferred`` while its connection has not
        failed, else any known one. Waits (polling) until one is ready or time is up."""
        while True:
            now = monotonic_ms()
            conn = self.network.nodes.get(preferred) if preferred is not None else None
            if conn is not None and conn.failures == 0:
                candidates = [conn.node_id]
            else:
                candidates = list(self.network.nodes)
            for node in candidates:
                if self.network.ready(node, now):
                    self.connected_once = True
                    return node
            left = self.deadline_ms - now
            if left <= 0:
                why = f": {self.last_failure}" if self.last_failure else ""
                within = f"within {self.timeout_ms} ms{why}"
                if not self.connected_once:
                    raise NoBrokersAvailable(
                        f"no broker of {self.bootstrap_text} could be reached {within}"
                    )
                raise KafkaTimeoutError(f"no broker of {self.bootstrap_text} was ready {within}")
            self._poll(min(POLL_MS, left))

    def _poll(self, timeout_ms: int) -> None:
        now = monotonic_ms()
        for response in self.network.poll(timeout_ms, now):
            response.complete(now)

    def _wait(self, ms: int) -> None:
        """Let ``ms`` pass (bounded by the deadline) while connections progress."""
        until = min(self.deadline_ms, monotonic_ms() + ms)
        while (left := until - monotonic_ms()) > 0:
            self._poll(left)
