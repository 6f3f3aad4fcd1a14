"""Process identity: (pid, start time), so a reused pid is never mistaken for the original.

The start time is field 22 of ``/proc/<pid>/stat`` (clock ticks since boot), read directly:
it is cheap and exact, and the pool is Linux-only anyway (POSIX shared memory in /dev/shm).
"""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (the state) on, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:  # (FileNotFoundError, ProcessLookupError, ...: it does not exist)
        return None
    # The command name (field 2) is in parentheses and may contain spaces: split after it.
    return data[data.rindex(b")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it does not exist."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):  # zombie or dead: it holds nothing any more
        return None
    return int(fields[19])


def age_seconds(pid: int) -> float | None:
    """How long the process has run, or None if it does not exist."""
    started = start_time(pid)
    if started is None:
        return None
    with open("/proc/uptime", "rb") as f:
        uptime = float(f.read().split()[0])
    return max(0.0, uptime - started / _TICKS)


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time the process has used, or None if it does not exist."""
    fields = _stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICKS


# A start time that says: the process is of another PID namespace, whose pid means nothing
# here (slots.py records each slot's namespace). Such a process is never judged dead from
# here: a container with a PID namespace of its own would take another's live pool for
# an orphan, and remove it, or reclaim its slots.
OUT_OF_SIGHT = -1


def is_alive(pid: int, started: int) -> bool:
    """True if ``pid`` is running and is the same process that started at ``started``
    (or, ``OUT_OF_SIGHT``, is of another PID namespace: taken for alive)."""
    if started == OUT_OF_SIGHT:
        return True
    if pid <= 0:
        return False
    return start_time(pid) == started


_namespace: tuple[int, int] = (0, 0)  # (pid, namespace): read again after a fork


def pid_namespace() -> int:
    """The inode of this process's PID namespace, or 0 if /proc does not say (a /proc of
    another namespace): 0 is taken for "the same as everyone's"."""
    global _namespace
    pid = os.getpid()
    if _namespace[0] != pid:
        try:
            _namespace = (pid, os.stat("/proc/self/ns/pid").st_ino)
        except OSError:
            _namespace = (pid, 0)
    return _namespace[1]


def my_identity() -> tuple[int, int]:
    pid = os.getpid()
    started = start_time(pid)
    assert started is not None
    return pid, started
