"""Locks a forked child never inherits taken, whether or not Python's at-fork hooks ran.

Rules:
- A thread lock is copied by ``fork`` in whatever state it had: one that another thread of
  the parent held at that moment stays taken in the child for good, because that thread
  does not exist there. Python's at-fork hooks renew its own locks (logging's, threading's),
  not ours, and a server that calls libc's ``fork()`` directly (an embedding server, holding
  the GIL) runs no hooks at all.
- So a lock that lives longer than one object of one process (a module's, a class's) is a
  ``ProcessLock`` (a table of them, a ``ProcessLocal``): one per process id, made on first
  use in each process. A child's
  first call gets a new, free lock; the parent's copy is never touched again.
- A lock of one object needs this only if a forked child can use that object: such an object
  renews its locks when it is re-made for the child (the facades' producers do).
- ``dict.setdefault`` is atomic under the GIL, so two threads of one process asking at once
  get the same lock; no lock guards the table (it would be inherited taken in turn).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")
LockT = TypeVar("LockT", bound=AbstractContextManager[Any])


class ProcessLocal(Generic[T]):
    """A value of this process: ``get()`` returns this process's, made on first use."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._by_pid: dict[int, T] = {}

    def get(self) -> T:
        pid = os.getpid()
        value = self._by_pid.get(pid)
        if value is None:
            for other in [p for p in self._by_pid if p != pid]:  # a parent's: never used here
                self._by_pid.pop(other, None)
            value = self._by_pid.setdefault(pid, self._make())
        return value


class ProcessLock(ProcessLocal[LockT]):
    """A lock of this process, taken with ``with``."""

    def __enter__(self) -> bool:
        return bool(self.get().__enter__())

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.get().__exit__(kind, exc, tb)
