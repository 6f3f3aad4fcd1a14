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
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from shmkafka.broker_stub.cluster import Cluster, ClusterConfig
from shmkafka.broker_stub.faults import Faults
from shmkafka.broker_stub.flush import Flusher
from shmkafka.broker_stub.handlers import (
    Handlers,
    PendingAck,
    api_keys,
    supported,
)
from shmkafka.protocol.clock import wall_ms
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.frames import FrameDecoder, decode_request_header, encode_response
from shmkafka.protocol.messages import (
    APIS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    ProduceRequest,
)
from shmkafka.protocol.schema import Message

log = logging.getLogger("shmkafka.broker_stub")
REPLICATION_TICK_S = 0.002
RETENTION_CHECK_MS = 1000
T = TypeVar("T")


class _Node:
    def __init__(self, stub: BrokerStub, node_id: int, port: int) -> None:
        self.stub = stub
        self.node_id = node_id
        self.port = port
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.handlers = Handlers(stub.cluster, stub.faults, node_id, stub.host, stub.ports)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, self.stub.host, self.port,
                                                 reuse_address=True)  # fmt: skip
        self.port = self.server.sockets[0].getsockname()[1]
        self.stub.ports[self.node_id] = self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in list(self.writers):
                writer.close()
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.server.wait_closed()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(1 << 20):
                for frame in decoder.feed(data):
                    if not await self._answer(frame, writer):
                        return
        except (ConnectionError, KafkaError) as exc:
            log.debug("node %d: connection ended: %s", self.node_id, exc)
        except asyncio.CancelledError:
            pass  # the node stops; end normally (asyncio's stream callback reads the result)
        finally:
            self.writers.discard(writer)
            if task is not None:
                self.tasks.discard(task)
            writer.close()

    async def _answer(self, frame: bytes, writer: asyncio.StreamWriter) -> bool:
        header, at = decode_request_header(frame)
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
        result = self.handlers.handle(request)
        response: Message
        if isinstance(result, PendingAck):
            await self._await_replication(result)
            response = result.response
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

    async def _await_replication(self, pending: PendingAck) -> None:
        cluster = self.stub.cluster
        while not all(cluster.acked(p, last) for p, last in pending.waits):
            await asyncio.sleep(REPLICATION_TICK_S)
            cluster.replicate(wall_ms())

    async def _long_poll(self, request: FetchRequest) -> Message:
        deadline = asyncio.get_running_loop().time() + request.max_wait_ms / 1000
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
            if self.handlers.has_data(request):
                break
        response = self.handlers.handle(request)
        assert not isinstance(response, PendingAck)  # a Fetch never waits for replication
        return response


class BrokerStub:
    """An N-node Kafka-protocol cluster on loopback, in a background thread.

    ``with BrokerStub(nodes=3) as cluster:`` gives ``cluster.bootstrap``; faults are set
    through ``cluster.faults`` and the leadership methods."""

    def __init__(self, nodes: int = 1, *, port: int = 0, host: str = "127.0.0.1",
                 seed: int = 0, flush: str = "async", flush_interval_ms: int = 1000,
                 group_commit: bool = True, **config: Any) -> None:  # fmt: skip
        self.host = host
        self.cluster = Cluster(ClusterConfig(nodes=nodes, **config))
        self.flusher: Flusher | None = None
        if self.cluster.config.storage_dir is not None:
            self.flusher = Flusher(flush, flush_interval_ms, group_commit, self.cluster.disk_logs)
        self.faults = Faults(seed=seed)
        self.ports: dict[int, int] = {}
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
            self.cluster.replicate(wall_ms())

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._stop_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        if self.flusher is not None:
            self.flusher.close()
            for log in self.cluster.disk_logs():
                log.close()

    async def _stop_all(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for node in self._nodes.values():
            await node.stop()

    def __enter__(self) -> BrokerStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.ports[n]}" for n in self.cluster.node_ids)

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

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.run(lambda: self.cluster.topics[topic][partition].leader_log.hw)

    def control(self, op: str, **args: Any) -> Any:
        """One control operation by name (the control command's entry): a method of this
        object or of ``faults``."""
        target = getattr(self, op, None) or getattr(self.faults, op, None)
        if op.startswith("_") or target is None or not callable(target):
            raise ValueError(f"unknown control operation {op!r}")
        if target.__self__ is self.faults:
            return self.run(lambda: target(**args))
        return target(**args)
