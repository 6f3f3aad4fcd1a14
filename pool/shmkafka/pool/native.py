"""Whether the C extension may be used: ``SHMKAFKA_PURE_PYTHON=1`` turns off every C part
at once (the append fast path, the futures and their tracker, the public calls' entry and
the delivery-report server), as if the extension had not been built. Read when each module
that imports the extension is first imported, so set it before importing shmkafka (a
spawned process inherits it)."""

from __future__ import annotations

import os

PURE_PYTHON_ENV = "SHMKAFKA_PURE_PYTHON"


def turned_off() -> bool:
    """``SHMKAFKA_PURE_PYTHON`` is set now (the accumulator asks again for each pool, so a
    test that sets it after import still gets the Python append)."""
    return bool(os.environ.get(PURE_PYTHON_ENV))


def check() -> None:
    """Raise ImportError when the extension is turned off (callers import it next, in a
    ``try`` that falls back to Python on ImportError)."""
    if turned_off():
        raise ImportError(f"{PURE_PYTHON_ENV} is set: the C extension is not used")
