"""An in-memory transport for the Sender: its ``Network`` over broker_stub's sans-IO
``Handlers`` — no sockets, no threads, no sleeps (Java's ``MockClient``, but with a real
broker behind it).

Every request is framed by the Sender's own ``ClientProtocol``, decoded as a broker decodes
it, handled by broker_stub's handlers on the shared ``Cluster``, and the encoded response is
fed back through the same ``ClientProtocol``. Responses wait on their connection until
``poll``, in order; a test may ``hold`` a node's responses and ``release`` them one by one,
``disconnect`` a node (what is in flight fails with NETWORK_EXCEPTION), or take a node
``down`` (not ready, so nothing is sent to it). Requests unanswered for
``request_timeout_ms`` fail with REQUEST_TIMED_OUT, as on a socket.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from shmkafka.broker_stub.cluster import Cluster
from shmkafka.broker_stub.faults import Faults
from shmkafka.broker_stub.handlers import Handlers, PendingAck, api_keys
from shmkafka.protocol.broker_errors import NetworkExceptionError, RequestTimedOutError
from shmkafka.protocol.clock import wall_ms
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.frames import (
    ClientProtocol,
    FrameDecoder,
    decode_request_header,
    encode_response,
)
from shmkafka.protocol.messages import APIS
from shmkafka.protocol.schema import Message
from shmkafka.protocol.versions import broker_versions, negotiate
from shmkafka.sender.connection import ClientResponse, ResponseHandler
from shmkafka.shm.broker_stats import BrokerStats

HOST = "mem"
BASE_PORT = 9000


@dataclass
class _Waiting:
    correlation_id: int
    handler: ResponseHandler
    sent_ms: int
    answer: PendingAck | Message | None  # None: the broker dropped the connection
    header: tuple[int, int]  # api key, version


@dataclass
class _Connection:
    broker: int
    protocol: ClientProtocol = field(default_factory=ClientProtocol)
    in_flight: deque[_Waiting] = field(default_factory=deque)


class MemoryNetwork:
    def __init__(
        self,
        cluster: Cluster,
        faults: Faults | None = None,
        *,
        max_in_flight: int = 5,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self.cluster = cluster
        self.faults = faults or Faults()
        self.max_in_flight = max_in_flight
        self.request_timeout_ms = request_timeout_ms
        ports = {node: BASE_PORT + node for node in cluster.node_ids}
        self.handlers = {n: Handlers(cluster, self.faults, n, HOST, ports) for n in ports}
        self._broker_at = {(HOST, port): node for node, port in ports.items()}
        self.versions = broker_versions(api_keys())
        self.conns: dict[int, _Connection] = {}  # the Sender's node id → connection
        # (broker node, request as the broker decoded it), in send order
        self.sent: list[tuple[int, Message]] = []
        self.held: set[int] = set()  # broker nodes whose responses wait for ``release``
        self.down: set[int] = set()  # broker nodes the Sender cannot reach
        self.bytes_sent = 0
        self.on_event: Callable[[int, str], None] | None = None
        self._completed: list[ClientResponse] = []

    def node_stats(self, now_ms: int) -> list[BrokerStats]:
        """No per-connection counters in memory: statistics show no brokers."""
        del now_ms
        return []

    def connected(self) -> bool:
        return any(conn.broker not in self.down for conn in self.conns.values())

    @property
    def bootstrap(self) -> tuple[str, ...]:
        return tuple(f"{host}:{port}" for host, port in self._broker_at)

    # ------------------------------------------------------------------ Network

    def set_nodes(self, nodes: Iterable[tuple[int, str, int]]) -> None:
        wanted = {node_id: self._broker_at[(host, port)] for node_id, host, port in nodes}
        for node_id in list(self.conns):
            if wanted.get(node_id) != self.conns[node_id].broker:
                self._fail(node_id, NetworkExceptionError("the broker left the cluster or moved"))
                del self.conns[node_id]
        for node_id, broker in wanted.items():
            self.conns.setdefault(node_id, _Connection(broker))

    def ready(self, node_id: int, now_ms: int) -> bool:
        conn = self.conns.get(node_id)
        return (
            conn is not None
            and conn.broker not in self.down
            and conn.broker in self.cluster.live
            and len(conn.in_flight) < self.max_in_flight
        )

    def in_flight_count(self, node_id: int | None = None) -> int:
        if node_id is None:
            return sum(len(c.in_flight) for c in self.conns.values())
        conn = self.conns.get(node_id)
        return 0 if conn is None else len(conn.in_flight)

    def version_for(self, node_id: int, request_cls: type[Message]) -> int:
        del node_id  # (every broker of the cluster speaks the same versions)
        return negotiate(request_cls.API_KEY, self.versions)

    def send(
        self,
        node_id: int,
        request: Message,
        handler: ResponseHandler,
        now_ms: int,
        *,
        expect_response: bool = True,
    ) -> int:
        conn = self.conns[node_id]
        assert self.ready(node_id, now_ms), f"node {node_id} is not ready"
        version = negotiate(request.API_KEY, self.versions)
        correlation_id, frame = conn.protocol.send_request(
            request, version, expect_response=expect_response
        )
        self.bytes_sent += len(frame)
        answer = self._serve(conn.broker, frame)
        if answer is None:  # the broker dropped the connection
            if expect_response:
                conn.in_flight.append(_Waiting(correlation_id, handler, now_ms, None, (0, 0)))
            self.disconnect(conn.broker)
        elif not expect_response:  # acks=0: done once written
            self._completed.append(ClientResponse(node_id, handler, None, None, now_ms))
        else:
            header = (request.API_KEY, version)
            conn.in_flight.append(_Waiting(correlation_id, handler, now_ms, answer, header))
        return correlation_id

    def poll(self, timeout_ms: int, now_ms: int) -> list[ClientResponse]:
        del timeout_ms  # nothing to wait for: time moves only when the test moves it
        for node_id, conn in list(self.conns.items()):
            oldest = conn.in_flight[0] if conn.in_flight else None
            if oldest is not None and now_ms - oldest.sent_ms > self.request_timeout_ms:
                self._fail(node_id, RequestTimedOutError(f"no response from {node_id}"))
            elif conn.broker not in self.held:
                self._deliver(node_id, len(conn.in_flight))
        out, self._completed = self._completed, []
        return out

    def add_wakeup(self, sock: socket.socket, on_ready: Callable[[], None]) -> None:
        del sock, on_ready  # nothing here blocks

    def close(self) -> None:
        for node_id in self.conns:
            self._fail(node_id, NetworkExceptionError("the client closed"))
        self._completed.clear()

    # ------------------------------------------------------------------ the test's hands

    def hold(self, broker: int) -> None:
        self.held.add(broker)

    def release(self, broker: int, count: int | None = None) -> None:
        """Let ``count`` (default: all) held responses of ``broker`` through at next poll."""
        for node_id, conn in self.conns.items():
            if conn.broker == broker:
                self._deliver(node_id, len(conn.in_flight) if count is None else count)
        if count is None:
            self.held.discard(broker)

    def disconnect(self, broker: int) -> None:
        """Connections to ``broker`` drop: what is in flight on them fails."""
        for node_id, conn in self.conns.items():
            if conn.broker == broker:
                self._fail(node_id, NetworkExceptionError(f"node {broker} closed the connection"))

    # ------------------------------------------------------------------ internals

    def _serve(self, broker: int, frame: bytes) -> PendingAck | Message | None:
        """The broker's side: decode, handle, and the response (None: connection dropped)."""
        (body,) = FrameDecoder().feed(frame)
        header, at = decode_request_header(body)
        request_cls, _ = APIS[header.api_key]
        request = request_cls.decode(memoryview(body)[at:], header.api_version, strict=False)
        self.sent.append((broker, request))
        if self.faults.should_drop(broker, header.api_key, "before"):
            return None
        answer = self.handlers[broker].handle(request)
        if self.faults.should_drop(broker, header.api_key, "after"):
            return None
        return answer

    def _deliver(self, node_id: int, count: int) -> None:
        conn = self.conns[node_id]
        for _ in range(min(count, len(conn.in_flight))):
            waiting = conn.in_flight[0]
            response = waiting.answer
            assert response is not None  # (a dropped connection fails what it had at once)
            if isinstance(response, PendingAck):  # acks=all: replicate until acknowledged
                self.cluster.replicate(wall_ms())
                if not all(self.cluster.acked(p, last) for p, last in response.waits):
                    return
                response = response.response
            conn.in_flight.popleft()
            api_key, version = waiting.header
            frame = encode_response(api_key, version, waiting.correlation_id, response)
            ((_, decoded),) = conn.protocol.receive_bytes(frame)
            self._completed.append(
                ClientResponse(node_id, waiting.handler, decoded, None, waiting.sent_ms)
            )

    def _fail(self, node_id: int, error: KafkaError) -> None:
        conn = self.conns[node_id]
        for waiting in conn.in_flight:
            self._completed.append(
                ClientResponse(node_id, waiting.handler, None, error, waiting.sent_ms)
            )
        conn.in_flight.clear()
        conn.protocol = ClientProtocol()  # a new connection: correlation ids start over
