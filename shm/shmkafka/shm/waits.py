"""Waits on a POSIX semaphore that a signal does not end.

Rules:
- When a signal interrupts ``sem_timedwait``, posix_ipc runs the signal's Python handler
  (on the main thread; on any other no handler runs there) and, if the handler returned,
  raises ``SignalError``. Python's own waits go on in that case (PEP 475), and so does
  ``acquire``, for what is left of its timeout: an app's SIGTERM or SIGCHLD handler must
  not fail a ``send()`` waiting for memory, nor end the thread that delivers results.
- A handler that raises (``KeyboardInterrupt``) ends the wait with its exception, as it ends
  ``time.sleep``.
"""

from __future__ import annotations

import time

import posix_ipc


def acquire(sem: posix_ipc.Semaphore, timeout: float) -> bool:
    """``sem.acquire(timeout)``, on through signals: True once acquired, False when the
    timeout passed first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sem.acquire(timeout)
            return True
        except posix_ipc.BusyError:
            return False
        except posix_ipc.SignalError:
            timeout = max(0.0, deadline - time.monotonic())
