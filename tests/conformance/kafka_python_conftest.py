"""The conftest.py that run.py puts beside kafka-python's own test files (copied unchanged
from its sdist). It is ours; nothing of kafka-python's is changed. It:

- starts Tansu on 127.0.0.1 for the session (tests/peers.py) and hands it to kafka-python's
  own fixtures through their own switch for an already running broker, ``KAFKA_URI``:
  their ``kafka_broker_factory`` then returns ``KafkaFixture(external=True)``. Tansu is
  stopped at the end of the session;
- supplies ``test.service``, which their ``test/integration/fixtures.py`` imports but the
  sdist does not ship: ``ExternalService`` (all that external mode uses) and a
  ``SpawnedService`` that refuses to start a JVM broker;
- with ``SHMKAFKA_CONFORMANCE_PRODUCER=shmkafka``, rebinds the module-level name
  ``KafkaProducer`` to ``shmkafka.KafkaProducer`` in every conftest and test module that
  imported kafka-python's class (``from kafka import KafkaProducer``). In
  test_producer_integration.py the producers come from ``kafka_producer_factory`` in their
  test/integration/conftest.py, which calls that name. Consumers and admin clients stay
  kafka-python's;
- writes each test's outcome as JSON to ``SHMKAFKA_CONFORMANCE_REPORT`` for run.py.

``KAFKA_VERSION`` (read at import time by their modules) and ``KAFKA_ROOT`` (an existing
directory their ``Fixture`` insists on) are set by run.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import types
from typing import Any

import kafka
import pytest

VARIANT = os.environ.get("SHMKAFKA_CONFORMANCE_PRODUCER", "kafka-python")
REPORT = os.environ.get("SHMKAFKA_CONFORMANCE_REPORT")
EXPECTED_KAFKA = os.environ.get("SHMKAFKA_CONFORMANCE_KAFKA_VERSION")
if VARIANT not in ("kafka-python", "shmkafka"):
    raise pytest.UsageError(f"SHMKAFKA_CONFORMANCE_PRODUCER={VARIANT!r}")
if EXPECTED_KAFKA and kafka.__version__ != EXPECTED_KAFKA:
    raise pytest.UsageError(
        f"kafka-python {kafka.__version__} imported from {kafka.__file__}, "
        f"expected {EXPECTED_KAFKA}"
    )

ORIGINAL = kafka.KafkaProducer
if VARIANT == "shmkafka":
    import shmkafka

    PRODUCER: type = shmkafka.KafkaProducer
else:
    PRODUCER = ORIGINAL


# --------------------------------------------------------------- test.service (not in sdist)


class ExternalService:
    """A broker that is already running (kafka-python's test/service.py, external mode)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass


class SpawnedService:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("conformance runs use an external broker (Tansu) only")


_service = types.ModuleType("test.service")
_service.ExternalService = ExternalService  # type: ignore[attr-defined]
_service.SpawnedService = SpawnedService  # type: ignore[attr-defined]
sys.modules["test.service"] = _service


# --------------------------------------------------------------- the producer class

_swapped: list[str] = []


def _swap(module: object) -> None:
    if VARIANT != "shmkafka" or getattr(module, "KafkaProducer", None) is not ORIGINAL:
        return
    module.KafkaProducer = PRODUCER  # type: ignore[attr-defined]
    _swapped.append(getattr(module, "__name__", repr(module)))


def pytest_plugin_registered(plugin: object, manager: pytest.PytestPluginManager) -> None:
    """Conftest modules (their test/integration/conftest.py) register as plugins on import."""
    del manager
    if isinstance(plugin, types.ModuleType):
        _swap(plugin)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Test modules that import the class themselves (checked after they are imported)."""
    modules = {id(i.module): i.module for i in items if isinstance(i, pytest.Function)}
    for module in modules.values():
        _swap(module)
    if VARIANT == "shmkafka" and items and not _swapped:
        raise pytest.UsageError("no module imported kafka.KafkaProducer: nothing was swapped")


# --------------------------------------------------------------- the broker

_stack = contextlib.ExitStack()
_bootstrap: list[str] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    del session
    from tests.peers import run_tansu

    if os.environ.get("SHMKAFKA_CONFORMANCE_BROKER") == "broker_stub":
        host, port = _broker_stub()
    else:
        host, port = _stack.enter_context(run_tansu()).brokers[0]
    peer_bootstrap = f"{host}:{port}"
    os.environ["KAFKA_URI"] = f"tcp://{host}:{port}"
    _bootstrap.append(peer_bootstrap)
    if REPORT:  # so that run.py can clean up after a run it had to kill
        with open(REPORT + ".broker", "w", encoding="utf-8") as f:
            f.write(peer_bootstrap)


def _broker_stub() -> tuple[str, int]:
    """shmkafka's broker_stub (one node): it has a transaction coordinator and reports
    aborted transactions to read_committed consumers, which Tansu does not."""
    from shmkafka.broker_stub.server import BrokerStub

    stub = _stack.enter_context(BrokerStub(nodes=1, partitions=2))
    host, port = stub.bootstrap.rsplit(":", 1)
    return host, int(port)


def pytest_sessionfinish(session: pytest.Session) -> None:
    del session
    try:
        if VARIANT == "shmkafka" and _bootstrap:
            from tests.conformance.run import reap_senders

            for line in reap_senders(_bootstrap[0], grace_s=10):
                print(f"\nconformance: {line}", file=sys.stderr)
    finally:
        _stack.close()
        _write_report()


def pytest_report_header() -> list[str]:
    return [
        f"conformance: producer={PRODUCER.__module__}.{PRODUCER.__qualname__}, "
        f"kafka-python {kafka.__version__} from {os.path.dirname(kafka.__file__ or '')}"
    ]


# --------------------------------------------------------------- the report

_results: dict[str, dict[str, Any]] = {}
_started = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
        entry["message"] = f"{report.when}: {message}" if report.when != "call" else message
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        longrepr = report.longrepr
        entry["message"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    entry[f"{report.when}_s"] = round(report.duration, 3)


def _write_report() -> None:
    if not REPORT:
        return
    data = {
        "variant": VARIANT,
        "producer": f"{PRODUCER.__module__}.{PRODUCER.__qualname__}",
        "kafka_python": kafka.__version__,
        "swapped_in": _swapped,
        "seconds": round(time.monotonic() - _started, 1),
        "results": _results,
    }
    with open(REPORT, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
