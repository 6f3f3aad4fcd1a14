"""The broker_stub server: one asyncio event loop (the reactor) serving N nodes, node i on
``port + i``, plus ``BrokerStub``, the handle tests and the CLI use.

Rules:
- Sockets live here only. Per connection: read frames, decode the header and body with
  ``shmkafka.protocol``, hand the request to the node's ``Handlers``, write the response.
  Kafka answers a connection's requests in order, so one connection is served serially.
- Waits are awaited here: acks=all until the high watermark covers the batch (replication
  runs every ``REPLICATION_TICK_S`` when ``replication_lag_ms`` > 0), a Fetch until data or
  ``max_wait_ms``, a paused node until it is resumed.
- The control API (``BrokerStub.faults``, ``move_leader``, ``kill_node``...) may be called
  from any thread: it runs on the loop's thread.
- Security: with an ``ssl_context`` every node's listener speaks TLS (``tls_context`` makes
  one from PEM files); with a ``sasl`` config each connection has a ``SaslSession``
  (auth.py) that says which requests it may send, answers the SASL requests, and says
  when to close. Plaintext without SASL is the default.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import ssl
import threading
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from shmkafka.broker_stub.auth import SaslConfig, SaslSession
from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.broker_stub.coordinator import Coordinator
from shmkafka.broker_stub.faults import Faults
from shmkafka.broker_stub.flush import Flusher
from shmkafka.broker_stub.handlers import (
    Handlers,
    PendingAck,
    api_keys,
    supported,
)
from shmkafka.broker_stub.netns import listening
from shmkafka.broker_stub.peers import PeerLinks
from shmkafka.protocol.clock import monotonic_ms, wall_ms
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.frames import FrameDecoder, decode_request_header, encode_response
from shmkafka.protocol.messages import (
    APIS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from shmkafka.protocol.messages.produce import TopicProduceResponse
from shmkafka.protocol.schema import Message

log = logging.getLogger("shmkafka.broker_stub")
REPLICATION_TICK_S = 0.002
RETENTION_CHECK_MS = 1000
T = TypeVar("T")


def tls_context(cert: str, key: str, ca: str | None = None,
                require_client_cert: bool = False) -> ssl.SSLContext:  # fmt: skip
    """A server TLS context from PEM files. With ``ca``, client certificates are checked
    against it when sent (Kafka's ssl.client.auth=requested), or demanded with
    ``require_client_cert`` (=required, mutual TLS)."""
    if require_client_cert and ca is None:
        raise ValueError("a required client certificate needs a CA to check it against")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # no system CAs: only ``ca`` is trusted
    context.load_cert_chain(cert, key)
    if ca is not None:
        context.load_verify_locations(ca)
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


class _TlsStream:
    """TLS over a connection's plain stream, through ``ssl.MemoryBIO``s. asyncio's own TLS
    (``start_server(ssl=...)``) drops the alert of a failed handshake, so a client refused
    (no or a bad client certificate) would see a bare close; a Kafka broker sends the alert,
    and so does this."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: ssl.SSLContext
    ) -> None:
        self._reader, self._writer = reader, writer
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    def _send_pending(self) -> None:
        pending = self._outgoing.read()
        if pending:
            self._writer.write(pending)

    async def _receive(self) -> bool:
        data = await self._reader.read(1 << 16)
        if not data:
            return False
        self._incoming.write(data)
        return True

    async def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._send_pending()
                if not await self._receive():
                    raise ConnectionError("closed during the TLS handshake") from None
            except ssl.SSLError:
                self._send_pending()  # the alert
                await self._writer.drain()
                raise
        self._send_pending()  # the server's last flight, TLS 1.3 session tickets
        await self._writer.drain()

    async def read(self, size: int) -> bytes:
        while True:
            try:
                data = self._tls.read(size)
                self._send_pending()  # anything TLS answers on its own (a key update)
                return data
            except ssl.SSLWantReadError:
                self._send_pending()
                if not await self._receive():
                    return b""
            except ssl.SSLZeroReturnError:  # the client's close_notify
                return b""
            except ssl.SSLError:
                self._send_pending()
                raise

    def write(self, data: bytes) -> None:
        self._tls.write(data)
        self._send_pending()

    async def drain(self) -> None:
        await self._writer.drain()

    def close_notify(self) -> None:
        with contextlib.suppress(ssl.SSLError):  # it waits for the client's; ours is out
            self._tls.unwrap()
        self._send_pending()


CLOSE_SETTLE_S = 0.05


class _Node:
    def __init__(self, stub: BrokerStub, node_id: int, port: int) -> None:
        self.stub = stub
        self.node_id = node_id
        self.port = port
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.handlers = Handlers(stub.cluster, stub.faults, node_id, stub.host, stub.ports,
                                 stub.coordinator)  # fmt: skip
        self.handlers.hosts = stub.hosts
        self.host = stub.hosts.get(node_id, stub.host)
        self.auth_events: Counter[str] = Counter()  # authenticated, failed, expired...

    async def start(self) -> None:
        namespace = self.stub.netns.get(self.node_id)
        if namespace is None:
            self.server = await asyncio.start_server(self._serve, self.host, self.port,
                                                     reuse_address=True)  # fmt: skip
        else:
            sock = listening(namespace, self.host, self.port)
            self.server = await asyncio.start_server(self._serve, sock=sock)
        self.port = self.server.sockets[0].getsockname()[1]
        self.stub.ports[self.node_id] = self.stub.advertised.get(self.node_id, self.port)

    async def stop(self) -> None:
        if self.server is None:
            return
        self.server.close()
        closing: list[asyncio.StreamWriter] = []
        loop = asyncio.get_running_loop()
        settle = loop.time() + CLOSE_SETTLE_S
        # A connection accepted just before the close gets its transport, and its _serve,
        # a few loop rounds later: sweep until none came for a while.
        while loop.time() < settle or self.writers or self.tasks:
            await asyncio.sleep(0.005)
            if loop.time() > settle + 1:
                break
            writers = list(self.writers)
            closing += writers
            for writer in writers:
                writer.close()
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in closing:  # closed before the loop stops, not left to the collector
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)
        await self.server.wait_closed()
        self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        decoder = FrameDecoder()
        session = SaslSession(self.stub.sasl, self.auth_events)
        out: _Writer = writer
        read: Callable[[int], Awaitable[bytes]] = reader.read
        try:
            if self.stub.ssl_context is not None:
                tls = _TlsStream(reader, writer, self.stub.ssl_context)
                await tls.handshake()
                out, read = tls, tls.read
            while data := await read(1 << 20):
                for frame in decoder.feed(data):
                    if not await self._answer(frame, out, session):
                        return
        except (ConnectionError, KafkaError, ssl.SSLError) as exc:
            log.debug("node %d: connection ended: %s", self.node_id, exc)
        except asyncio.CancelledError:
            pass  # the node stops; end normally (asyncio's stream callback reads the result)
        finally:
            self.writers.discard(writer)
            if task is not None:
                self.tasks.discard(task)
            if isinstance(out, _TlsStream):
                out.close_notify()
            writer.close()

    async def _answer(self, frame: bytes, writer: _Writer, session: SaslSession) -> bool:
        if session.unframed:
            log.debug("node %d: unframed SASL tokens (SaslHandshake v0) are not served",
                      self.node_id)  # fmt: skip
            return False
        header, at = decode_request_header(frame)
        if not session.admits(header.api_key, monotonic_ms()):
            log.debug("node %d: api key %d refused in SASL state %s: closing", self.node_id,
                      header.api_key, session.state)  # fmt: skip
            return False
        faults = self.stub.faults
        while self.node_id in faults.paused:
            await asyncio.sleep(0.005)
        if faults.should_drop(self.node_id, header.api_key, "before"):
            return False
        delay = faults.delay_s(self.node_id)
        if delay:
            await asyncio.sleep(delay)
        if not supported(header.api_key, header.api_version):
            if header.api_key != ApiVersionsRequest.API_KEY:
                return False  # versions are negotiated: a client beyond them is broken
            # An ApiVersions we cannot read: UNSUPPORTED_VERSION with our ranges, in v0.
            refusal = ApiVersionsResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=api_keys()
            )
            writer.write(encode_response(header.api_key, 0, header.correlation_id, refusal))
            await writer.drain()
            return True
        request_cls, _ = APIS[header.api_key]
        request = request_cls.decode(memoryview(frame)[at:], header.api_version, strict=False)
        if isinstance(request, (SaslHandshakeRequest, SaslAuthenticateRequest)):
            answer = session.handle(request, header.api_version, monotonic_ms(), wall_ms())
            writer.write(encode_response(header.api_key, header.api_version,
                                         header.correlation_id, answer))  # fmt: skip
            await writer.drain()
            if session.closing and self.stub.sasl is not None:
                await asyncio.sleep(self.stub.sasl.failed_authentication_delay_ms / 1000)
            return not session.closing
        result = self.handlers.handle(request)
        response: Message
        if isinstance(result, PendingAck):
            response = await self._await_replication(result)
        elif isinstance(request, FetchRequest) and not self.handlers.has_data(request):
            response = await self._long_poll(request)
        else:
            response = result
        if isinstance(request, ProduceRequest) and request.acks != 0:
            await self._commit()  # --flush sync: the ack waits for the fsync (group commit)
        if isinstance(request, ProduceRequest) and request.acks == 0:
            return not faults.should_drop(self.node_id, header.api_key, "after")
        if faults.should_drop(self.node_id, header.api_key, "after"):
            return False
        if self.node_id not in self.stub.cluster.live:
            return False
        writer.write(encode_response(header.api_key, header.api_version, header.correlation_id,
                                     response))  # fmt: skip
        await writer.drain()
        return True

    async def _commit(self) -> None:
        flusher = self.stub.flusher
        if flusher is None or flusher.mode != "sync" or not self.handlers.touched:
            return
        logs = {log.disk for p in self.handlers.touched for log in p.logs.values() if log.disk}
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def committed() -> None:
            loop.call_soon_threadsafe(done.set_result, None)

        flusher.commit(logs, committed)
        await done

    async def _await_replication(self, pending: PendingAck) -> ProduceResponse:
        """acks=all: each partition's answer once the cluster has one (cluster.py's
        ``ack_state``), or REQUEST_TIMED_OUT at the request's timeout, as Kafka's purgatory."""
        cluster = self.stub.cluster
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, pending.timeout_ms) / 1000
        codes: dict[tuple[str, int], int] = {}
        while True:
            for p, last, epoch in pending.waits:
                if (p.topic, p.index) not in codes:
                    code = cluster.ack_state(p, last, self.node_id, epoch)
                    if code is not None:
                        codes[(p.topic, p.index)] = code
            if len(codes) == len(pending.waits):
                break
            if loop.time() >= deadline:
                for p, _, _ in pending.waits:
                    codes.setdefault((p.topic, p.index), ErrorCode.REQUEST_TIMED_OUT)
                break
            await asyncio.sleep(REPLICATION_TICK_S)
            cluster.replicate(wall_ms())
        for code in codes.values():
            if code:
                self.handlers.errors_sent[code] += 1
        return _with_codes(pending.response, codes)

    async def _long_poll(self, request: FetchRequest) -> Message:
        deadline = asyncio.get_running_loop().time() + request.max_wait_ms / 1000
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
            if self.handlers.has_data(request):
                break
        response = self.handlers.handle(request)
        assert not isinstance(response, PendingAck)  # a Fetch never waits for replication
        return response


def _with_codes(response: ProduceResponse, codes: dict[tuple[str, int], int]) -> ProduceResponse:
    """``response`` with the partitions whose code is an error answering it."""
    if not any(codes.values()):
        return response
    return ProduceResponse(responses=tuple(
        TopicProduceResponse(topic.name, tuple(
            dataclasses.replace(answer, error_code=code, base_offset=-1)
            if (code := codes.get((topic.name, answer.index), 0)) else answer
            for answer in topic.partition_responses
        ))
        for topic in response.responses
    ), throttle_time_ms=response.throttle_time_ms)  # fmt: skip


class BrokerStub:
    """An N-node Kafka-protocol cluster on loopback, in a background thread.

    ``with BrokerStub(nodes=3) as cluster:`` gives ``cluster.bootstrap``; faults are set
    through ``cluster.faults`` and the leadership methods."""

    def __init__(self, nodes: int = 1, *, port: int = 0, host: str = "127.0.0.1",
                 seed: int = 0, flush: str = "async", flush_interval_ms: int = 1000,
                 group_commit: bool = True, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslConfig | None = None, node_hosts: list[str] | None = None,
                 node_netns: list[str] | None = None, **config: Any) -> None:  # fmt: skip
        self.host = host
        # node id → its own address, and the network namespace it listens in (--node-netns)
        self.hosts: dict[int, str] = dict(enumerate(node_hosts or [], start=1))
        self.netns: dict[int, str] = dict(enumerate(node_netns or [], start=1))
        self.peers: PeerLinks | None = None
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.cluster = Cluster(ClusterConfig(nodes=nodes, **config))
        self.flusher: Flusher | None = None
        if self.cluster.config.storage_dir is not None:
            self.flusher = Flusher(flush, flush_interval_ms, group_commit, self.cluster.disk_logs)
        self.faults = Faults(seed=seed)
        self.coordinator = Coordinator(self.cluster)  # (one for the cluster's nodes)
        self.ports: dict[int, int] = {}  # node id → the port Metadata advertises
        self.advertised: dict[int, int] = {}  # node id → a proxy's port, if one is in front
        self._base_port = port
        self._nodes: dict[int, _Node] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="broker-stub",
                                        daemon=True)  # fmt: skip
        self._ticker: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> BrokerStub:
        self._thread.start()
        self._call(self._start_all())
        return self

    async def _start_all(self) -> None:
        for i, node_id in enumerate(self.cluster.node_ids):
            node = _Node(self, node_id, self._base_port + i if self._base_port else 0)
            self._nodes[node_id] = node
            await node.start()
        if self.netns:  # nodes apart: their links are measured, not assumed
            self.peers = PeerLinks({n: (self.netns.get(n), node.host, node.port)
                                    for n, node in self._nodes.items()})  # fmt: skip
            self.peers.start()
        self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        last_retention = 0
        while True:
            if wall_ms() - last_retention >= RETENTION_CHECK_MS:
                last_retention = wall_ms()
                for parts in self.cluster.topics.values():
                    for p in parts:
                        for log in p.logs.values():
                            log.apply_retention(last_retention)
            await asyncio.sleep(
                REPLICATION_TICK_S if self.cluster.config.replication_lag_ms else 0.05
            )
            if self.peers is not None:
                self.cluster.set_links(self.peers.up(monotonic_ms()), wall_ms())
            self.cluster.replicate(wall_ms())

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._stop_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        # A connection the stopped loop never got to close (accepted in its last rounds)
        # is collected here, not in whatever code of the app runs the collector next.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        if self.flusher is not None:
            self.flusher.close()
            for log in self.cluster.disk_logs():
                log.close()

    async def _stop_all(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self.peers is not None:
            await self.peers.stop()
        for node in self._nodes.values():
            await node.stop()

    def __enter__(self) -> BrokerStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def security_protocol(self) -> str:
        """What a client sets: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
        tls = self.ssl_context is not None
        if self.sasl is None:
            return "SSL" if tls else "PLAINTEXT"
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.hosts.get(n, self.host)}:{self.ports[n]}"
                        for n in self.cluster.node_ids)  # fmt: skip

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the loop's thread (the cluster state's only writer)."""

        async def call() -> T:
            return fn()

        result: T = self._call(call())
        return result

    # ------------------------------------------------------------------ control

    def create_topic(self, name: str, partitions: int | None = None, rf: int | None = None) -> None:
        code = self.run(lambda: self.cluster.create_topic(name, partitions, rf))
        if code:
            raise ValueError(f"create_topic {name!r}: error code {code}")

    def add_partitions(self, topic: str, count: int) -> None:
        """Grow ``topic`` to ``count`` partitions, as CreatePartitions does."""
        code = self.run(lambda: self.cluster.add_partitions(topic, count))
        if code:
            raise ValueError(f"add_partitions {topic!r} to {count}: error code {code}")

    def partition_count(self, topic: str) -> int:
        return self.run(lambda: len(self.cluster.topics[topic]))

    def advertise(self, node: int, port: int) -> None:
        """Metadata gives ``port`` for ``node`` from now on (a proxy in front of it)."""
        self.advertised[node] = port
        self.ports[node] = port

    def move_leader(self, topic: str, partition: int, to: int) -> None:
        self.run(lambda: self.cluster.move_leader(topic, partition, to))

    def leader(self, topic: str, partition: int) -> int:
        return self.run(lambda: self.cluster.topics[topic][partition].leader)

    def kill_node(self, node: int) -> None:
        """The node stops: its port closes, its connections drop, leadership moves."""
        self.run(lambda: self.cluster.kill_node(node))
        self._call(self._nodes[node].stop())

    def restart_node(self, node: int) -> None:
        """The node comes back on the same port and recovers its replicas."""
        self._call(self._nodes[node].start())
        self.run(lambda: self.cluster.restart_node(node))

    def fenced(self) -> list[int]:
        """The nodes out of the quorum now (their links cut: see cluster.py)."""
        return self.run(lambda: sorted(self.cluster.fenced))

    def pause_node(self, node: int) -> None:
        self.run(lambda: self.faults.paused.add(node))

    def resume_node(self, node: int) -> None:
        self.run(lambda: self.faults.paused.discard(node))

    def errors_sent(self) -> dict[int, int]:
        """Produce error codes the nodes answered so far, by code (faults and real ones)."""
        total: dict[int, int] = {}
        for node in self._nodes.values():
            for code, count in node.handlers.errors_sent.items():
                total[code] = total.get(code, 0) + count
        return total

    def auth_events(self) -> dict[str, int]:
        """SASL outcomes so far over all nodes: authenticated, reauthenticated, failed, and
        expired (connections closed because their session expired)."""
        return self.run(lambda: dict(sum((n.auth_events for n in self._nodes.values()),
                                         Counter[str]())))  # fmt: skip

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.run(lambda: self.cluster.topics[topic][partition].leader_log.hw)

    def move_coordinator(self, transactional_id: str, to: int) -> None:
        """Make node ``to`` the transaction coordinator of ``transactional_id``: the old
        one answers NOT_COORDINATOR from now on."""
        self.run(lambda: self.coordinator.move(transactional_id, to))

    def control(self, op: str, **args: Any) -> Any:
        """One control operation by name (the control command's entry): a method of this
        object or of ``faults``."""
        target = getattr(self, op, None) or getattr(self.faults, op, None)
        if op.startswith("_") or target is None or not callable(target):
            raise ValueError(f"unknown control operation {op!r}")
        if target.__self__ is self.faults:
            return self.run(lambda: target(**args))
        return target(**args)
