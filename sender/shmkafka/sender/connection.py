"""Broker connections: the only module of the Sender that touches sockets.

Rules:
- Non-blocking sockets under one ``selectors`` loop, one connection per node. The protocol
  itself is the sans-IO ``ClientProtocol``: this module moves bytes, nothing else.
- A connection is usable once ApiVersions has been answered; versions are negotiated per
  API from then on (``version_for``).
- At most ``max_in_flight`` requests wait for a response on a connection; a request not
  answered within ``request_timeout_ms`` fails with ``RequestTimedOutError`` and closes the
  connection (as the Java client does), failing everything else in flight on it.
- A connection that fails is retried after a backoff that doubles from
  ``reconnect_backoff_ms`` to ``reconnect_backoff_max_ms`` (with 20% jitter).
- Time is passed in (``now_ms``) so the Sender's loop, not this module, owns the clock.
- Each request carries the handler its response goes to; ``poll`` returns them in the
  order they finished.
- Failures the app must hear of go to ``on_event(code, text)`` with librdkafka's codes and
  wording, as often as librdkafka reports them: each failed connect (``_TRANSPORT``) or
  resolution (``_RESOLVE``) attempt (they are paced by the reconnect backoff), and
  ``_ALL_BROKERS_DOWN`` once each time no node is left connected.
- ``Network`` is what the Sender needs of a transport: this module's
  ``NetworkClient`` over sockets, or an in-memory one in tests (tests/sender/memnet.py).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import random
import selectors
import socket
import ssl
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from shmkafka.protocol.broker_errors import NetworkExceptionError, RequestTimedOutError, for_code
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import KafkaError, ProtocolError
from shmkafka.protocol.frames import ClientProtocol
from shmkafka.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from shmkafka.protocol.sasl import SaslError
from shmkafka.protocol.schema import Message
from shmkafka.protocol.versions import broker_versions, negotiate
from shmkafka.sender.authentication import Authenticator, SaslSettings
from shmkafka.sender.node_counters import NodeCounters
from shmkafka.sender.outbox import Outbox
from shmkafka.shm.broker_stats import BrokerStats
from shmkafka.shm.events import ALL_BROKERS_DOWN, AUTHENTICATION, RESOLVE, SSL, TRANSPORT

EventSink = Callable[[int, str], None]


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    TLS = "tls"  # the TLS handshake
    HANDSHAKE = "handshake"  # ApiVersions
    AUTHENTICATING = "authenticating"  # SASL
    READY = "ready"


@dataclass(frozen=True)
class ClientResponse:
    """The outcome of one request: a response, or the error that ended it."""

    node_id: int
    handler: ResponseHandler
    response: Message | None
    error: KafkaError | None
    sent_ms: int

    def complete(self, now_ms: int) -> None:
        self.handler(self, now_ms)


ResponseHandler = Callable[[ClientResponse, int], None]


class Network(Protocol):
    """What the Sender needs of a transport to the brokers."""

    bytes_sent: int
    on_event: EventSink | None  # failures the app must hear of (librdkafka code, text)

    def set_nodes(self, nodes: Iterable[tuple[int, str, int]]) -> None: ...

    def ready(self, node_id: int, now_ms: int) -> bool: ...

    def in_flight_count(self, node_id: int | None = None) -> int: ...

    def version_for(self, node_id: int, request_cls: type[Message]) -> int: ...

    def send(
        self,
        node_id: int,
        request: Message,
        handler: ResponseHandler,
        now_ms: int,
        *,
        expect_response: bool = True,
    ) -> int: ...

    def poll(self, timeout_ms: int, now_ms: int) -> list[ClientResponse]: ...

    def add_wakeup(self, sock: socket.socket, on_ready: Callable[[], None]) -> None: ...

    def node_stats(self, now_ms: int) -> list[BrokerStats]: ...

    def connected(self) -> bool: ...

    def close(self) -> None: ...


def _handshake(response: ClientResponse, now_ms: int) -> None:
    """Marks the ApiVersions request of a connection (answered inside this module)."""
    raise AssertionError("a handshake response is consumed by the connection")


def _authentication(response: ClientResponse, now_ms: int) -> None:
    """Marks a SASL request of a connection (answered inside this module)."""
    raise AssertionError("a SASL response is consumed by the connection")


_INTERNAL = (_handshake, _authentication)


@dataclass
class _InFlight:
    correlation_id: int
    handler: ResponseHandler
    sent_ms: int
    expect_response: bool


@dataclass
class NodeConnection:
    node_id: int
    host: str
    port: int
    client_id: str
    max_in_flight: int
    request_timeout_ms: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    state: ConnectionState = ConnectionState.DISCONNECTED
    sock: socket.socket | None = None
    protocol: ClientProtocol = field(init=False)
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    in_flight: deque[_InFlight] = field(default_factory=deque)
    outbox: Outbox = field(default_factory=Outbox)
    failures: int = 0
    next_attempt_ms: int = 0
    api_versions_version: int = ApiVersionsRequest.MAX_VERSION
    connect_started_ms: int = 0
    counters: NodeCounters = field(default_factory=NodeCounters)
    auth: Authenticator | None = None
    reauthenticate_at_ms: int = 0  # KIP-368: 0 never

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}/{self.node_id if self.node_id >= 0 else 'bootstrap'}"

    def __post_init__(self) -> None:
        self.protocol = ClientProtocol(self.client_id)

    def is_ready(self) -> bool:
        return self.state is ConnectionState.READY and len(self.in_flight) < self.max_in_flight

    def version_for(self, request_cls: type[Message]) -> int:
        return negotiate(request_cls.API_KEY, self.versions)


class NetworkClient:
    """Connections to every known node, driven by ``poll``."""

    def __init__(
        self,
        client_id: str,
        *,
        max_in_flight: int,
        request_timeout_ms: int,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslSettings | None = None,
        security_protocol: str = "PLAINTEXT",
    ) -> None:
        self.client_id = client_id
        # librdkafka names a broker "sasl_ssl://host:port/id" unless it is plaintext
        self._name_prefix = "" if security_protocol == "PLAINTEXT" else (
            f"{security_protocol.lower()}://")  # fmt: skip
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.max_in_flight = max_in_flight
        self.request_timeout_ms = request_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.selector = selectors.DefaultSelector()
        self.nodes: dict[int, NodeConnection] = {}
        self._completed: list[ClientResponse] = []
        self.bytes_sent = 0
        self.requests_sent = 0
        self.on_event: EventSink | None = None
        self._all_down_reported = False

    # ------------------------------------------------------------------ nodes

    def set_nodes(self, nodes: Iterable[tuple[int, str, int]]) -> None:
        """Known brokers (node id, host, port); a node whose address changed reconnects."""
        wanted = {node_id: (host, port) for node_id, host, port in nodes}
        for node_id in list(self.nodes):
            conn = self.nodes[node_id]
            if wanted.get(node_id) != (conn.host, conn.port):
                self._close(conn, NetworkExceptionError("the broker left the cluster or moved"))
                del self.nodes[node_id]
        for node_id, (host, port) in wanted.items():
            if node_id not in self.nodes:
                self.nodes[node_id] = NodeConnection(
                    node_id, host, port, self.client_id, self.max_in_flight,
                    self.request_timeout_ms, self.reconnect_backoff_ms,
                    self.reconnect_backoff_max_ms,
                )  # fmt: skip

    def ready(self, node_id: int, now_ms: int) -> bool:
        """True if a request can be sent to the node now; starts connecting otherwise."""
        conn = self.nodes.get(node_id)
        if conn is None:
            return False
        if conn.state is ConnectionState.DISCONNECTED and now_ms >= conn.next_attempt_ms:
            self._connect(conn, now_ms)
        elif conn.state is ConnectionState.AUTHENTICATING and not conn.in_flight:
            self._authenticate(conn, now_ms)  # (waiting for an OAUTHBEARER token)
        elif (conn.state is ConnectionState.READY and conn.reauthenticate_at_ms
              and now_ms >= conn.reauthenticate_at_ms):  # fmt: skip
            if conn.in_flight:
                return False  # KIP-368: drain, then authenticate the session again
            self._start_authentication(conn, now_ms)
        return conn.is_ready()

    def in_flight_count(self, node_id: int | None = None) -> int:
        """Requests waiting for a response, on one node (0 if unknown) or on all."""
        if node_id is None:
            return sum(len(c.in_flight) for c in self.nodes.values())
        conn = self.nodes.get(node_id)
        return 0 if conn is None else len(conn.in_flight)

    def version_for(self, node_id: int, request_cls: type[Message]) -> int:
        return self.nodes[node_id].version_for(request_cls)

    # ------------------------------------------------------------------ requests

    def send(
        self,
        node_id: int,
        request: Message,
        handler: ResponseHandler,
        now_ms: int,
        *,
        expect_response: bool = True,
    ) -> int:
        conn = self.nodes[node_id]
        assert conn.is_ready(), f"node {node_id} is not ready"
        correlation_id, pieces = conn.protocol.send_request_pieces(
            request, conn.version_for(type(request)), expect_response=expect_response
        )
        size = sum(len(piece) for piece in pieces)
        conn.outbox.extend(pieces)
        conn.counters.tx += 1
        conn.counters.txbytes += size
        self.bytes_sent += size
        self.requests_sent += 1
        if expect_response:
            conn.in_flight.append(_InFlight(correlation_id, handler, now_ms, True))
        else:
            # acks=0: done once the bytes are handed to the socket (completed on flush).
            self._completed.append(ClientResponse(node_id, handler, None, None, now_ms))
        self._flush(conn, now_ms)
        return correlation_id

    def poll(self, timeout_ms: int, now_ms: int) -> list[ClientResponse]:
        """Wait up to ``timeout_ms`` for I/O, then return every finished request."""
        self._expire(now_ms)
        if self._completed:
            timeout_ms = 0
        for key, events in self.selector.select(max(0, timeout_ms) / 1000):
            if isinstance(key.data, _Wakeup):
                key.data.on_ready()
                continue
            conn: NodeConnection = key.data
            if conn.state is ConnectionState.TLS:
                self._tls_step(conn, now_ms)
                continue
            if events & selectors.EVENT_WRITE:
                self._on_writable(conn, now_ms)
            if events & selectors.EVENT_READ and conn.sock is not None:
                self._on_readable(conn, now_ms)
        out, self._completed = self._completed, []
        return out

    def node_stats(self, now_ms: int) -> list[BrokerStats]:
        """Each connection's counters, for statistics."""
        return [
            conn.counters.snapshot(conn.node_id, f"{conn.host}:{conn.port}", conn.state,
                                   conn.failures, len(conn.in_flight), bool(conn.outbox), now_ms)
            for conn in self.nodes.values()
        ]  # fmt: skip

    def connected(self) -> bool:
        """A broker connection is up."""
        return any(conn.state is ConnectionState.READY for conn in self.nodes.values())

    def add_wakeup(self, sock: socket.socket, on_ready: Callable[[], None]) -> None:
        """A socket whose readability only ends ``poll`` early (another thread's doorbell)."""
        self.selector.register(sock, selectors.EVENT_READ, _Wakeup(on_ready))

    def close(self) -> None:
        for conn in self.nodes.values():
            self._close(conn, NetworkExceptionError("the client closed"))
        self._completed.clear()
        self.selector.close()

    # ------------------------------------------------------------------ internals

    def _connect(self, conn: NodeConnection, now_ms: int) -> None:
        conn.connect_started_ms = now_ms
        try:
            infos = socket.getaddrinfo(conn.host, conn.port, type=socket.SOCK_STREAM)
            family, kind, proto, _, address = infos[0]
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            self._report(conn, RESOLVE, f"Failed to resolve '{conn.host}:{conn.port}': {reason}")
            self._failed(conn, now_ms, NetworkExceptionError(f"cannot resolve {conn.host}: {exc}"))
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self._report_connect_failure(conn, code, now_ms)
            self._failed(
                conn, now_ms, NetworkExceptionError(f"connect to {conn.host}:{conn.port}: {code}")
            )
            return
        conn.sock = sock
        conn.state = ConnectionState.CONNECTING
        conn.protocol = ClientProtocol(conn.client_id)
        conn.outbox.clear()
        conn.connect_started_ms = now_ms
        self.selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def _on_writable(self, conn: NodeConnection, now_ms: int) -> None:
        if conn.state is ConnectionState.CONNECTING:
            assert conn.sock is not None
            error = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self._report_connect_failure(conn, error, now_ms)
                self._close(
                    conn, NetworkExceptionError(f"connect to {conn.host}:{conn.port}: {error}")
                )
                self._failed(conn, now_ms, None)
                return
            if self.ssl_context is not None:
                self._start_tls(conn, now_ms)
                return
            conn.state = ConnectionState.HANDSHAKE
            self._send_api_versions(conn, now_ms)
        self._flush(conn, now_ms)

    def _start_tls(self, conn: NodeConnection, now_ms: int) -> None:
        assert conn.sock is not None and self.ssl_context is not None
        self.selector.unregister(conn.sock)
        conn.sock = self.ssl_context.wrap_socket(
            conn.sock, server_hostname=conn.host, do_handshake_on_connect=False
        )
        self.selector.register(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        conn.state = ConnectionState.TLS
        self._tls_step(conn, now_ms)

    def _tls_step(self, conn: NodeConnection, now_ms: int) -> None:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self.selector.modify(sock, selectors.EVENT_READ, conn)
            return
        except ssl.SSLWantWriteError:
            self.selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
            return
        except (ssl.SSLError, OSError) as exc:
            took = max(0, now_ms - conn.connect_started_ms)
            reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
            verify = getattr(exc, "verify_message", None)
            self._report(conn, SSL, f"SSL handshake failed: {verify or reason} "
                                    f"(after {took}ms in state SSL_HANDSHAKE)")  # fmt: skip
            self._close(conn, NetworkExceptionError(f"TLS with {conn.host}:{conn.port}: {exc}"))
            self._failed(conn, now_ms, None)
            return
        conn.state = ConnectionState.HANDSHAKE
        self.selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        self._send_api_versions(conn, now_ms)
        self._flush(conn, now_ms)

    def _send_api_versions(self, conn: NodeConnection, now_ms: int) -> None:
        hello = ApiVersionsRequest(client_software_name="shmkafka", client_software_version="0.1")
        correlation_id, frame = conn.protocol.send_request(hello, conn.api_versions_version)
        conn.outbox.append(frame)
        conn.in_flight.append(_InFlight(correlation_id, _handshake, now_ms, True))

    def _flush(self, conn: NodeConnection, now_ms: int) -> None:
        if conn.sock is None or conn.state in (ConnectionState.CONNECTING, ConnectionState.TLS):
            return
        try:
            conn.outbox.write_to(conn.sock)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError as exc:
            self._close(conn, NetworkExceptionError(f"send to node {conn.node_id}: {exc}"))
            self._failed(conn, now_ms, None)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0)
        self.selector.modify(conn.sock, events, conn)

    def _on_readable(self, conn: NodeConnection, now_ms: int) -> None:
        assert conn.sock is not None
        try:
            data = conn.sock.recv(1 << 20)
            while isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending():
                data += conn.sock.recv(1 << 20)  # (decrypted bytes the selector cannot see)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError as exc:
            self._close(conn, NetworkExceptionError(f"receive from node {conn.node_id}: {exc}"))
            self._failed(conn, now_ms, None)
            return
        conn.counters.rxbytes += len(data)
        if not data:
            self._report(conn, TRANSPORT, "Disconnected (after the broker closed the connection)")
            self._close(conn, NetworkExceptionError(f"node {conn.node_id} closed the connection"))
            self._failed(conn, now_ms, None)
            return
        try:
            responses = conn.protocol.receive_bytes(data)
        except ProtocolError as exc:
            error = NetworkExceptionError(f"protocol error from node {conn.node_id}: {exc}")
            self._close(conn, error)
            self._failed(conn, now_ms, None)
            return
        for correlation_id, response in responses:
            request = conn.in_flight.popleft()
            assert request.correlation_id == correlation_id
            conn.counters.answered(max(0, now_ms - request.sent_ms) * 1000)
            if request.handler is _handshake:
                assert isinstance(response, ApiVersionsResponse)
                self._on_api_versions(conn, response, now_ms)
            elif request.handler is _authentication:
                self._on_authentication(conn, response, now_ms)
            else:
                self._completed.append(
                    ClientResponse(conn.node_id, request.handler, response, None, request.sent_ms)
                )

    def _on_api_versions(
        self, conn: NodeConnection, response: ApiVersionsResponse, now_ms: int
    ) -> None:
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            offered = broker_versions(response.api_keys)
            key = ApiVersionsRequest.API_KEY
            conn.api_versions_version = negotiate(key, offered) if key in offered else 0
            self._send_api_versions(conn, now_ms)
            self._flush(conn, now_ms)
            return
        if response.error_code:
            self._close(conn, for_code(response.error_code)("ApiVersions failed"))
            self._failed(conn, now_ms, None)
            return
        conn.versions = broker_versions(response.api_keys)
        if self.sasl is not None:
            self._start_authentication(conn, now_ms)
            return
        self._up(conn)

    def _up(self, conn: NodeConnection) -> None:
        conn.state = ConnectionState.READY
        conn.counters.connects += 1
        conn.failures = 0
        self._all_down_reported = False

    def _start_authentication(self, conn: NodeConnection, now_ms: int) -> None:
        assert self.sasl is not None
        conn.state = ConnectionState.AUTHENTICATING
        conn.auth = Authenticator(self.sasl)
        conn.reauthenticate_at_ms = 0
        conn.connect_started_ms = now_ms  # (the authentication's own timeout starts now)
        self._authenticate(conn, now_ms)

    def _authenticate(self, conn: NodeConnection, now_ms: int) -> None:
        """Send the exchange's next request (nothing while a token is not there yet)."""
        assert conn.auth is not None
        request = conn.auth.next_request()
        if request is None:
            return
        version = negotiate(request.API_KEY, conn.versions)
        correlation_id, frame = conn.protocol.send_request(request, version)
        conn.outbox.append(frame)
        conn.in_flight.append(_InFlight(correlation_id, _authentication, now_ms, True))
        self._flush(conn, now_ms)

    def _on_authentication(self, conn: NodeConnection, response: Message, now_ms: int) -> None:
        assert conn.auth is not None
        try:
            conn.auth.on_response(response)
        except SaslError as exc:
            took = max(0, now_ms - conn.connect_started_ms)
            self._report(conn, AUTHENTICATION, f"SASL authentication error: {exc.args[0]} "
                                               f"(after {took}ms in state AUTH_REQ)")  # fmt: skip
            self._close(conn, NetworkExceptionError(f"SASL with node {conn.node_id} failed"))
            self._failed(conn, now_ms, None)
            return
        if not conn.auth.done:
            self._authenticate(conn, now_ms)
            return
        conn.reauthenticate_at_ms = conn.auth.reauthenticate_at(now_ms)
        self._up(conn)

    def _expire(self, now_ms: int) -> None:
        for conn in self.nodes.values():
            if conn.in_flight and now_ms - conn.in_flight[0].sent_ms > conn.request_timeout_ms:
                self._close(
                    conn,
                    RequestTimedOutError(
                        f"no response from node {conn.node_id} within {conn.request_timeout_ms} ms"
                    ),
                )
                self._failed(conn, now_ms, None)
            elif (
                conn.state in (ConnectionState.CONNECTING, ConnectionState.TLS,
                               ConnectionState.AUTHENTICATING)
                and now_ms - conn.connect_started_ms > conn.request_timeout_ms
            ):  # fmt: skip
                self._report_connect_failure(conn, errno.ETIMEDOUT, now_ms)
                error = NetworkExceptionError(f"connect to node {conn.node_id} timed out")
                self._close(conn, error)
                self._failed(conn, now_ms, None)

    def _close(self, conn: NodeConnection, error: KafkaError) -> None:
        if conn.state is ConnectionState.READY:
            conn.counters.disconnects += 1
        if conn.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn.sock)
            conn.sock.close()
            conn.sock = None
        for request in conn.in_flight:
            if request.handler not in _INTERNAL:
                self._completed.append(
                    ClientResponse(conn.node_id, request.handler, None, error, request.sent_ms)
                )
        conn.in_flight.clear()
        conn.outbox.clear()
        conn.state = ConnectionState.DISCONNECTED

    def _failed(self, conn: NodeConnection, now_ms: int, error: KafkaError | None) -> None:
        conn.state = ConnectionState.DISCONNECTED
        conn.failures += 1
        backoff = min(
            conn.reconnect_backoff_max_ms,
            conn.reconnect_backoff_ms * (2 ** min(conn.failures - 1, 20)),
        )
        conn.next_attempt_ms = now_ms + int(backoff * random.uniform(0.8, 1.2))
        del error
        up = (ConnectionState.READY, ConnectionState.HANDSHAKE, ConnectionState.CONNECTING)
        if not self._all_down_reported and not any(c.state in up for c in self.nodes.values()):
            self._all_down_reported = True
            count = len(self.nodes)
            self._emit(ALL_BROKERS_DOWN, f"{count}/{count} brokers are down")

    def _report_connect_failure(self, conn: NodeConnection, code: int, now_ms: int) -> None:
        reason = os.strerror(code) if code > 0 else f"error {code}"
        took = max(0, now_ms - conn.connect_started_ms)
        where, state = f"{conn.host}:{conn.port}", f"after {took}ms in state CONNECT"
        self._report(conn, TRANSPORT, f"Connect to {where} failed: {reason} ({state})")

    def _report(self, conn: NodeConnection, code: int, text: str) -> None:
        """A failure of ``conn`` for the app."""
        self._emit(code, f"{self._name_prefix}{conn.name}: {text}")

    def _emit(self, code: int, text: str) -> None:
        if self.on_event is not None:
            self.on_event(code, text)


@dataclass(frozen=True)
class _Wakeup:
    on_ready: Callable[[], None]
