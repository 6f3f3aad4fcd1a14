"""A child forked without Python's at-fork hooks: they are run when the child first uses a
producer.

Rules:
- ``os.fork`` runs Python's at-fork hooks: in the child they renew the interpreter's locks
  (threading's, logging's, the import lock), forget the parent's threads, and run every
  ``os.register_at_fork`` hook (ours, OpenTelemetry's, ...). A server that calls libc's
  ``fork()`` directly (an embedding server such as uWSGI without
  ``--py-call-uwsgi-fork-hooks``) runs none of them. A lock that a thread of the parent held
  at that moment (the completion thread logging, starting or ending a thread) stays taken
  in the child for good, and the child's first producer call can wait on it without end:
  ``Thread.start`` waits on threading's lock, a log call on logging's.
- So the first producer call in a child that finds its producer forked
  (``Client.in_this_process``) asks ``run_skipped_hooks``: if this process's hooks did not
  run, it runs them (``PyOS_AfterFork_Child``, what such a server is meant to call), once.
- Only while the process has one thread: the hooks take every other thread for the
  parent's, and a thread the child started since would be forgotten while it runs. A child
  with more threads is left as it is (as before: it may hang on such a lock).
- Told by the pid that the hooks last ran in (recorded at import and by our own hook), so a
  child's child is told too.
"""

from __future__ import annotations

import ctypes
import os

_hooks_ran_in = os.getpid()  # (the importing process: its hooks are not a fork's)


def _hooks_ran() -> None:
    global _hooks_ran_in
    _hooks_ran_in = os.getpid()


os.register_at_fork(after_in_child=_hooks_ran)


def hooks_skipped() -> bool:
    """This process was forked and Python's at-fork hooks did not run in it."""
    return os.getpid() != _hooks_ran_in


def run_skipped_hooks() -> bool:
    """Run Python's at-fork hooks if this process's fork skipped them and it has one thread;
    returns whether it ran them."""
    if not hooks_skipped() or _threads() != 1:
        return False
    ctypes.pythonapi.PyOS_AfterFork_Child()  # (with the GIL: pythonapi holds it)
    return True


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # (no /proc: not known to be one)
        return 0
