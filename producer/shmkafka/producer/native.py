"""Whether the C extension may be used: ``SHMKAFKA_PURE_PYTHON=1`` turns off every C part
at once (the append fast path, the futures and their tracker, the public calls' entry and
the delivery-report server), as if the extension had not been built. Read when each module
that imports the extension is first imported, so set it before importing shmkafka (a
spawned process inherits it)."""

from __future__ import annotations

import os

PURE_PYTHON_ENV = "SHMKAFKA_PURE_PYTHON"


def check() -> None:
    """Raise ImportError when the extension is turned off (callers import it next, in a
    ``try`` that falls back to Python on ImportError)."""
    if os.environ.get(PURE_PYTHON_ENV):
        raise ImportError(f"{PURE_PYTHON_ENV} is set: the C extension is not used")
