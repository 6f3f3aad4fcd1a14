"""Keeping a live Sender on the pool, from an app process.

Rules:
- A producer makes sure a live Sender serves its pool: if the one recorded in the header is
  dead, it starts one (``python -m shmkafka.sender --pool NAME``) in its own session, with
  stdio on /dev/null, under the pool's spawn lock so concurrent producers start at most one
  between them (shm/sender_link.py).
- A Sender alive but silent (no heartbeat for ``stall_ms``: stopped, hung) is killed so a
  new one can take over; the new one re-sends what the old one had in flight.
- Senders this process started are reaped when they exit (no zombies).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any

from shmkafka.errors import KafkaTimeoutError
from shmkafka.protocol.clock import monotonic_ms
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.pool import SharedPool
from shmkafka.shm.sender_link import sender_alive, spawn_lock

SENDER_START_WAIT_S = 10.0
SENDER_STALL_MS = 10_000
log = logging.getLogger("shmkafka.producer")


def _spawn_detached(command: list[str]) -> int:
    """Start a process in its own session with stdio on /dev/null; returns its pid."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)]
        return os.posix_spawn(command[0], command, os.environ, file_actions=actions, setsid=True)
    finally:
        os.close(devnull)


class SenderSupervisor:
    def __init__(
        self,
        pool: SharedPool,
        sender_config: dict[str, Any],
        *,
        log_file: str | None = None,
        idle_exit_ms: int | None = None,
        stall_ms: int = SENDER_STALL_MS,
    ) -> None:
        self.pool = pool
        self.sender_config = sender_config
        self.log_file = log_file
        self.idle_exit_ms = idle_exit_ms
        self.stall_ms = stall_ms
        self._spawned: list[int] = []

    def ensure(self) -> None:
        """Start the pool's Sender unless a live, heartbeating one is recorded."""
        if sender_alive(self.pool):
            if not self._stalled():
                return
            self._stop_stalled()
        with spawn_lock(self.pool):
            if sender_alive(self.pool):
                return
            self._spawned.append(_spawn_detached(self._command()))
            deadline = time.monotonic() + SENDER_START_WAIT_S
            while not sender_alive(self.pool):
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError("the Sender did not start within 10 s")
                time.sleep(0.01)

    def check(self) -> None:
        """Reap Senders we started that exited; replace a dead Sender (the new one re-sends
        what the old one had in flight). A failure is logged and retried next check."""
        for pid in list(self._spawned):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self._spawned.remove(pid)
            except ChildProcessError:
                self._spawned.remove(pid)
        try:
            self.ensure()
        except (KafkaError, OSError) as exc:  # (posix_spawn's errors are OSErrors)
            log.warning("could not start a Sender: %s", exc)

    def _command(self) -> list[str]:
        command = [
            sys.executable, "-m", "shmkafka.sender", "--pool", self.pool.name,
            "--config-json", json.dumps(self.sender_config),
        ]  # fmt: skip
        if self.log_file:
            command += ["--log-file", self.log_file]
        if self.idle_exit_ms is not None:
            command += ["--idle-exit-ms", str(self.idle_exit_ms)]
        return command

    def _stalled(self) -> bool:
        return monotonic_ms() - self.pool.sender()[2] > self.stall_ms

    def _stop_stalled(self) -> None:
        pid, _, heartbeat = self.pool.sender()
        log.warning(
            "the Sender (pid %d) gave no heartbeat for %d ms: replacing it",
            pid,
            monotonic_ms() - heartbeat,
        )
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 5
        while sender_alive(self.pool) and time.monotonic() < deadline:
            time.sleep(0.01)
