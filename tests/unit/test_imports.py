"""Imports flow one way: cli/perf → sender → facades → producer → shm, protocol;
broker_stub → protocol. The facades (kafka-python's, confluent-kafka's and aiokafka's APIs,
their mirror modules and the package's root) sit on the one engine (``shmkafka.producer``),
which knows none of them. Every module of the package is parsed (imports inside functions
included) and checked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = ("producer", "facades", "sender", "shm", "protocol", "broker_stub", "perf", "cli")

# layer → the layers it may import (itself always allowed)
ALLOWED = {
    "protocol": set(),
    "shm": set(),
    "producer": {"shm", "protocol"},
    "facades": {"producer", "shm", "protocol"},
    "sender": {"facades", "producer", "shm", "protocol"},  # (the sidecar reads facades' configs)
    "broker_stub": {"protocol"},
    "perf": {"sender", "facades", "producer", "shm", "protocol", "broker_stub"},
    "cli": {"sender", "facades", "producer", "shm", "protocol", "broker_stub", "perf"},
}
# the mirror modules of the peers' import paths are the facades' public faces
MIRRORS = {"kafka", "confluent_kafka", "aiokafka"}
ROOT_FACADES = {"KafkaProducer", "Producer"}  # (``from shmkafka import Producer``)


def layer_of(module: str) -> str:
    """``shmkafka.sender.sender`` → sender. The package's root (``shmkafka``, whose
    ``KafkaProducer`` and ``Producer`` are the facades') and the mirrors belong to the
    facades; its other root modules (``shmkafka.errors``) to the engine."""
    parts = module.split(".")
    if module == "shmkafka.__main__":
        return "cli"
    if module == "shmkafka" or (len(parts) > 1 and parts[1] in MIRRORS | ROOT_FACADES):
        return "facades"
    if len(parts) > 1 and parts[1] in ALLOWED:
        return parts[1]
    return "producer"


def imported_modules(source: str) -> list[str]:
    """Every shmkafka module a source imports; ``from shmkafka import sender`` counts as
    ``shmkafka.sender``. The package uses no relative imports: one is an error."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import at line {node.lineno}"
            assert node.module is not None
            if node.module != "shmkafka":  # (``from shmkafka import x`` imports shmkafka.x)
                out.append(node.module)
            out += [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in out if name == "shmkafka" or name.startswith("shmkafka.")]


def wrong_way(module: str, source: str) -> list[str]:
    """One line per layer that ``module`` may not import but does."""
    mine = layer_of(module)
    wrong: dict[str, str] = {}
    for name in imported_modules(source):
        theirs = layer_of(name)
        if theirs != mine and theirs not in ALLOWED[mine]:
            wrong.setdefault(theirs, name)
    return [f"{module} ({mine}) imports {name} ({layer})" for layer, name in wrong.items()]


def package_modules() -> dict[str, Path]:
    modules = {}
    for root in SOURCE_ROOTS:
        for path in (ROOT / root / "shmkafka").rglob("*.py"):
            parts = path.relative_to(ROOT / root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def test_every_import_of_the_package_flows_one_way() -> None:
    modules = package_modules()
    assert {"shmkafka.cli", "shmkafka.sender.sender", "shmkafka.shm.pool"} <= set(modules)
    assert len(modules) > 60
    problems = [p for name, path in modules.items() for p in wrong_way(name, path.read_text())]
    assert problems == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("shmkafka.producer.handle", "def f():\n    from shmkafka.sender.service import x\n"),
        ("shmkafka.shm.pool", "import shmkafka.protocol.errors\n"),
        ("shmkafka.protocol.records", "from shmkafka.shm.layout import X\n"),
        ("shmkafka.sender.sender", "from shmkafka.broker_stub.server import BrokerStub\n"),
        ("shmkafka.broker_stub.server", "from shmkafka.shm import pool\n"),
        ("shmkafka.errors", "from shmkafka.perf.tool import run\n"),
        ("shmkafka.producer.handle", "from shmkafka import sender\n"),
        ("shmkafka.producer.engine", "from shmkafka.facades.confluent import producer\n"),
        ("shmkafka.producer.engine", "from shmkafka import Producer\n"),
        ("shmkafka.facades.aiokafka.producer", "from shmkafka.sender import admin\n"),
        ("shmkafka.shm.pool", "import shmkafka.kafka\n"),
    ],
)
def test_a_wrong_way_import_is_caught(module: str, source: str) -> None:
    assert len(wrong_way(module, source)) == 1


def test_relative_imports_are_refused() -> None:
    with pytest.raises(AssertionError, match="relative import"):
        imported_modules("from . import sender\n")


def test_cli_imports_a_subsystem_only_for_its_subcommand() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from shmkafka.cli import main; main(['version']); "
        "print(sorted(m for m in sys.modules if m.startswith('shmkafka.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "['shmkafka.cli']"
