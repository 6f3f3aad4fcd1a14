"""The links between a cluster's nodes, measured over the network: with each node in its own
namespace (``--node-netns``), every node keeps a connection from its namespace to every
other node's listener and sends it an ApiVersions request every ``period_ms``. The pairs
whose last round trip is recent are the links that get through: the cluster replicates
over them and counts its quorum by them (cluster.py's ``set_links``).

Rules:
- A probe waits at most ``timeout_ms`` for its answer; then, or on any error, its connection
  is dropped and made again a period later (a fresh SYN, as a fetcher's reconnect is).
- A link is up while its last round trip is under ``up_for_ms`` old: a lost packet or two
  (TCP retransmits them) does not take it down, a cut does.
- Probes run as the stub's own clients, so a node's faults (pause, delay) slow them as they
  slow any client, and a stopped node refuses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging

from shmkafka.broker_stub.netns import tcp_socket
from shmkafka.protocol.clock import monotonic_ms
from shmkafka.protocol.frames import FrameDecoder, encode_request
from shmkafka.protocol.messages import ApiVersionsRequest

log = logging.getLogger(__name__)


class PeerLinks:
    def __init__(
        self,
        where: dict[int, tuple[str | None, str, int]],  # node → (namespace, host, port)
        period_ms: int = 100,
        timeout_ms: int = 500,
        up_for_ms: int = 1000,
    ) -> None:
        self.where = where
        self.period_s, self.timeout_s = period_ms / 1000, timeout_ms / 1000
        self.up_for_ms = up_for_ms
        self.last_ok: dict[tuple[int, int], int] = {}  # (from, to) → monotonic ms
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for a, b in itertools.permutations(self.where, 2):
            self._tasks.append(loop.create_task(self._probe(a, b)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def up(self, now_ms: int) -> set[tuple[int, int]]:
        return {pair for pair, at in self.last_ok.items() if now_ms - at < self.up_for_ms}

    async def _probe(self, a: int, b: int) -> None:
        while True:
            try:
                await self._probe_over_one_connection(a, b)
            except Exception as exc:  # noqa: BLE001 - any failure is a link down, never the end
                log.debug("link %d→%d: %s: %s", a, b, type(exc).__name__, exc)
            await asyncio.sleep(self.period_s)

    async def _probe_over_one_connection(self, a: int, b: int) -> None:
        _, host, port = self.where[b]
        sock = tcp_socket(self.where[a][0])  # (from a's namespace, to b's address)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (host, port)), self.timeout_s)
            reader, writer = await asyncio.open_connection(sock=sock)
        except BaseException:
            sock.close()
            raise
        decoder = FrameDecoder()
        try:
            for correlation_id in itertools.count():
                writer.write(encode_request(ApiVersionsRequest(), 0, correlation_id, "peer"))
                await writer.drain()
                await asyncio.wait_for(self._one_frame(reader, decoder), self.timeout_s)
                self.last_ok[(a, b)] = monotonic_ms()
                await asyncio.sleep(self.period_s)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _one_frame(reader: asyncio.StreamReader, decoder: FrameDecoder) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                raise EOFError("closed by the peer")
            for _ in decoder.feed(data):
                return
