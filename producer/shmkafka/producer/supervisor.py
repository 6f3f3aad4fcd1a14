"""Keeping a live Sender on the pool, from an app process.

Rules:
- A producer makes sure a live Sender serves its pool: if the one recorded in the header is
  dead, it starts one (``python -m shmkafka.sender --pool NAME``) in its own session, with
  a real Python interpreter (``python_interpreter``: under uWSGI ``sys.executable`` is the
  server's binary). Its
  settings (secrets included) go through a pipe on its stdin, never its command line; stdout
  is /dev/null, under the pool's spawn lock so concurrent producers start at
  most one between them (pool/sender_link.py).
- Until it is up, the new Sender's stderr goes to a private file (mode 0600): a Sender that
  exits before it is up fails ``ensure`` at once with what it printed. Once it is up the
  file is removed; from then on the Sender's log lines reach the apps through the pool's
  event ring (shm/events.py).
- A new Sender killed at start (SIGKILL, SIGTERM: not a crash, not an error it printed)
  or not up in time is started again (``start``, within the producer's bound): a kill of
  a Sender is no reason for a producer to give up.
- A Sender alive but silent (no heartbeat for ``stall_ms``: stopped, hung) is killed so a
  new one can take over; the new one re-sends what the old one had in flight.
- Senders this process started are reaped when they exit (no zombies).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
from typing import Any

from shmkafka.pool.errors import KafkaTimeoutError, PoolError
from shmkafka.pool.sender_link import sender_alive, spawn_lock
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.clock import monotonic_ms
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.namespaces import refuse_out_of_sight

SENDER_START_WAIT_S = 10.0
SENDER_STALL_MS = 10_000
SENDER_START_BOUND_S = 30.0  # start()'s bound for a producer that gives none (max_block_ms 0)
RETRY_MAX_S = 10.0  # the longest pause between attempts to start a failing Sender
PYTHON_ENV = "SHMKAFKA_PYTHON"  # the interpreter that runs the Sender, if set
log = logging.getLogger("shmkafka.producer")


# Signals that someone sent (a kill, the OOM killer, a stop of the service): a Sender that
# died of one at start is started again; one that crashed (SIGSEGV, SIGABRT) is not.
KILLED = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


class SenderDiedAtStart(PoolError):
    """A Sender we started was killed (by a signal) before it was up: worth another try."""


def python_interpreter() -> str:
    """The Python that runs the Sender: ``$SHMKAFKA_PYTHON``; else this process's
    interpreter when ``sys.executable`` is one; else (an embedding server such as uWSGI,
    whose ``sys.executable`` is its own binary) this installation's ``bin/pythonX.Y``."""
    configured = os.environ.get(PYTHON_ENV)
    if configured:
        return configured
    major, minor = sys.version_info[:2]
    candidates = []
    if re.match(r"(python|pypy)", os.path.basename(sys.executable or "")):
        candidates.append(sys.executable)
    for prefix in dict.fromkeys((sys.prefix, sys.exec_prefix, sys.base_prefix)):
        for name in (f"python{major}.{minor}", f"python{major}", "python"):
            candidates.append(os.path.join(prefix, "bin", name))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise PoolError(
        f"no Python interpreter found to run the Sender (sys.executable is "
        f"{sys.executable!r}): set {PYTHON_ENV}"
    )


def _spawn_detached(command: list[str], stdin_data: bytes, stderr: int) -> int:
    """Start a process in its own session: ``stdin_data`` on its stdin (a pipe: never its
    command line, where ``ps`` shows it), stdout on /dev/null, stderr on the descriptor
    given; returns its pid."""
    devnull = os.open(os.devnull, os.O_RDWR)
    read_end, write_end = os.pipe()
    try:
        actions = [(os.POSIX_SPAWN_DUP2, read_end, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
                   (os.POSIX_SPAWN_DUP2, stderr, 2), (os.POSIX_SPAWN_CLOSE, write_end)]  # fmt: skip
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds() if fd != write_end]
        pid = os.posix_spawn(command[0], command, os.environ, file_actions=actions, setsid=True)
        os.close(read_end)
        read_end = -1
        try:
            with os.fdopen(write_end, "wb") as pipe:  # (a few KiB: within the pipe's buffer)
                write_end = -1
                pipe.write(stdin_data)
        except BrokenPipeError:
            pass  # it exited without reading: the caller reports its exit and stderr
        return pid
    finally:
        for fd in (devnull, read_end, write_end):
            if fd >= 0:
                os.close(fd)


def _inherited_fds() -> list[int]:
    """This process's descriptors above stderr that a spawned process would inherit: the
    Sender must not hold a pipe of its starter's (multiprocessing waits for a child's
    pipes to close: a worker that started the Sender would not be seen to exit)."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    fds.append(fd)
            except OSError:
                pass  # (the listing's own descriptor, closed by now)
    return fds


def _last_lines(path: str, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            text = f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-3:])


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
        self._failures = 0
        self._retry_at = 0.0

    def ensure(self) -> None:
        """Start the pool's Sender unless a live, heartbeating one is recorded."""
        if sender_alive(self.pool):
            if not self._stalled():
                return
            self._stop_stalled()
        with spawn_lock(self.pool):
            if sender_alive(self.pool):
                return
            refuse_out_of_sight(self.pool.segment)  # (a Sender that started since we attached)
            fd, errors = tempfile.mkstemp(prefix="shmkafka-sender-", suffix=".err")
            try:
                config = json.dumps(self.sender_config).encode()
                pid = _spawn_detached(self._command(), config, fd)
                self._spawned.append(pid)
                self._wait_up(pid, errors)
            finally:
                os.close(fd)
                os.unlink(errors)

    def start(self, within_s: float) -> None:
        """``ensure``, tried again for up to ``within_s`` (at least once) while the new
        Sender is killed at start or does not come up; an error the Sender printed (its
        settings, say) fails at once."""
        deadline = time.monotonic() + within_s
        pause = 0.05
        while True:
            try:
                self.ensure()
                return
            except (SenderDiedAtStart, KafkaTimeoutError) as exc:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("could not start a Sender (retrying in %.2f s): %s", pause, exc)
            time.sleep(pause)
            pause = min(1.0, 2 * pause)

    def _wait_up(self, pid: int, errors: str) -> None:
        """Wait until the Sender we started is up; fail at once if it exits first."""
        deadline = time.monotonic() + SENDER_START_WAIT_S
        running = True
        while not sender_alive(self.pool):
            if running:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    running = False
                    self._spawned.remove(pid)
                    code = os.waitstatus_to_exitcode(status)
                    if code != 0:  # (0: another Sender holds the pool, about to be up)
                        why = _last_lines(errors) or "it printed nothing"
                        died = SenderDiedAtStart if -code in KILLED else PoolError
                        raise died(f"the Sender exited at start (status {code}): {why}")
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
        if time.monotonic() < self._retry_at:
            return
        try:
            self.ensure()
            self._failures = 0
        except (KafkaError, OSError) as exc:  # (posix_spawn's errors are OSErrors)
            # A Sender that keeps failing at start is retried after a growing pause, not
            # five times a second by every process of the pool.
            self._failures += 1
            pause = min(RETRY_MAX_S, 0.2 * 2 ** min(self._failures, 10))
            self._retry_at = time.monotonic() + pause
            log.warning("could not start a Sender (retrying in %.1f s): %s", pause, exc)

    def _command(self) -> list[str]:
        command = [
            python_interpreter(), "-m", "shmkafka.sender", "--pool", self.pool.name,
            "--config-json", "-",  # (read from stdin: settings may hold secrets)
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
