"""Imports flow one way, and nothing imports itself back:

    cli, perf → facades → producer → pool → shm, protocol
    sender → pool → shm, protocol
    broker_stub → protocol

A module's layer is its source root (``pool/shmkafka/pool/…`` is in pool). The package's root
(``shmkafka``, whose ``KafkaProducer`` and ``Producer`` are the facades'), ``shmkafka.errors``
(kafka-python's names) and the mirrors of the peers' import paths live in facades/. Every
module is parsed, imports inside functions and under ``TYPE_CHECKING`` included, and the
graph of modules must have no circle. The C extensions follow the same rule: the files
of one extension share its ``_internal.h`` and link only among themselves; an extension
reaches a lower one through that one's capsule header, and no include goes up or round."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = (
    "producer", "facades", "sender", "pool", "shm", "protocol", "broker_stub", "perf", "cli",
    "otel",
)  # fmt: skip

# layer → the layers it may import (itself always allowed)
ALLOWED = {
    "protocol": set(),
    "shm": set(),
    "pool": {"shm", "protocol"},
    "producer": {"pool", "shm", "protocol"},
    "facades": {"producer", "pool", "protocol"},  # of pool, only FACADE_POOL_MODULES
    "sender": {"pool", "shm", "protocol"},
    "broker_stub": {"protocol"},
    "perf": {"facades", "producer", "pool", "shm", "protocol", "broker_stub", "sender"},
    "otel": {"facades", "producer", "pool", "shm", "protocol"},  # (its pool metrics read pools)
    "cli": {"facades", "producer", "pool", "shm", "protocol", "broker_stub", "perf", "sender"},
}


# The facades stand on the client's public API (producer/: Client, its PoolView, futures,
# transactions' client side); of the pool only its errors and config.
FACADE_POOL_MODULES = {"shmkafka.pool.errors", "shmkafka.pool.config"}


def package_modules() -> dict[str, str]:
    """Every module of the package → its layer (the source root it lives in)."""
    modules = {}
    for root in SOURCE_ROOTS:
        for path in (ROOT / root / "shmkafka").rglob("*.py"):
            parts = path.relative_to(ROOT / root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = root
        for path in (ROOT / root / "shmkafka").rglob("*.c"):  # (an extension is a module)
            parts = path.relative_to(ROOT / root).with_suffix("").parts
            modules[".".join(parts)] = root
    return modules


MODULES = package_modules()


def imported_modules(source: str, modules: dict[str, str] = MODULES) -> list[str]:
    """Every shmkafka module a source imports; ``from shmkafka.pool import native`` counts as
    ``shmkafka.pool.native``, ``from shmkafka.pool.config import X`` as ``shmkafka.pool.config``.
    The package uses no relative imports: one is an error."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import at line {node.lineno}"
            assert node.module is not None
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                out.append(submodule if submodule in modules else node.module)
    return [name for name in out if name == "shmkafka" or name.startswith("shmkafka.")]


def layer_of(module: str, modules: dict[str, str] = MODULES) -> str:
    """The layer of a module, or of the longest prefix of a name that is one."""
    name = module
    while name not in modules:
        assert "." in name, f"{module} is no module of the package"
        name = name.rsplit(".", 1)[0]
    return modules[name]


def wrong_way(module: str, source: str) -> list[str]:
    """One line per layer that ``module`` may not import but does."""
    mine = layer_of(module)
    wrong: dict[str, str] = {}
    for name in imported_modules(source):
        theirs = layer_of(name)
        if theirs != mine and theirs not in ALLOWED[mine]:
            wrong.setdefault(theirs, name)
    return [f"{module} ({mine}) imports {name} ({layer})" for layer, name in wrong.items()]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                other = stack.pop()
                part.append(other)
                if other == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def python_graph() -> dict[str, set[str]]:
    graph = {}
    for root in SOURCE_ROOTS:
        for path in (ROOT / root / "shmkafka").rglob("*.py"):
            parts = path.relative_to(ROOT / root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            # (a package's own __init__ is imported with its modules: not an edge of note)
            graph[name] = {
                other
                for other in imported_modules(path.read_text())
                if other != name and not name.startswith(other + ".")
            }
    return graph


def test_every_import_of_the_package_flows_one_way() -> None:
    assert {"shmkafka.cli", "shmkafka.sender.sender", "shmkafka.pool.shared_pool"} <= set(MODULES)
    assert len(MODULES) > 60
    problems = []
    for root in SOURCE_ROOTS:
        for path in (ROOT / root / "shmkafka").rglob("*.py"):
            parts = path.relative_to(ROOT / root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            problems += wrong_way(name, path.read_text())
    assert problems == []


def test_no_module_imports_itself_back() -> None:
    assert circles(python_graph()) == []


INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)
# a function definition in PEP 7's style: the type on its own line, the name at column 0
DEFINITION = re.compile(r"^(?P<type>[^\s#/*][^\n;]*)\n(?P<name>[A-Za-z_]\w*)\(", re.M)


def c_sources() -> dict[str, Path]:
    """Every C and header file of the package, by name (each name is used once)."""
    files: dict[str, Path] = {}
    for root in SOURCE_ROOTS:
        for path in [*(ROOT / root).rglob("*.c"), *(ROOT / root).rglob("*.h")]:
            assert path.name not in files, f"two C files named {path.name}"
            files[path.name] = path
    return files


def extension_of(name: str) -> str:
    """``_append_write.c``, ``_append_internal.h`` and ``_append.h`` → ``_append``."""
    return "_" + name.split(".")[0].split("_")[1]


def c_problems(files: dict[str, str], layers: dict[str, str]) -> list[str]:
    """What breaks the C rules, for C files by name (their text, their layer): an include of
    a header not ours, of another extension's ``_internal.h`` or of a higher layer's header;
    a function other files could link to that its extension's ``_internal.h`` does not
    declare; a circle among the extensions."""
    problems = []
    graph: dict[str, set[str]] = {}
    for name, text in files.items():
        mine = extension_of(name)
        graph.setdefault(mine, set())
        for header in INCLUDE.findall(text):
            if header not in files:
                problems.append(f"{name} includes {header}, which is not ours")
                continue
            theirs = extension_of(header)
            if theirs == mine:
                continue
            graph[mine].add(theirs)
            if header.endswith("_internal.h"):
                problems.append(f"{name} includes {header}, {theirs}'s own")
            elif layers[header] != layers[name] and layers[header] not in ALLOWED[layers[name]]:
                problems.append(f"{name} ({layers[name]}) includes {header} ({layers[header]})")
        if name.endswith(".c"):
            internal = files.get(f"{mine}_internal.h", "")
            problems += [
                f"{name} defines {match['name']}() for others to link to"
                for match in DEFINITION.finditer(text)
                if "static" not in match["type"]
                and match["type"] != "PyMODINIT_FUNC"
                and not re.search(rf"\b{match['name']}\(", internal)
            ]
    problems += [
        f"the extensions {' and '.join(part)} include each other" for part in circles(graph)
    ]
    return problems


def test_the_c_extensions_depend_one_way_and_link_only_inside() -> None:
    sources = c_sources()
    assert {"_append.c", "_tracker.c", "_tracker_entry.c", "_reports.c"} <= set(sources)
    files = {name: path.read_text() for name, path in sources.items()}
    layers = {name: path.relative_to(ROOT).parts[0] for name, path in sources.items()}
    assert c_problems(files, layers) == []


def test_a_wrong_c_part_is_caught() -> None:
    files = {
        "_a.c": '#include "_a_internal.h"\nint\nshared(void)\n{\n}\n',
        "_a_internal.h": "int shared(void);\n",
        "_a_more.c": "static int\nhidden(void)\n{\n}\n\nint\nstray(void)\n{\n}\n",
        "_b.c": '#include "_a_internal.h"\n#include "_c.h"\n',
        "_c.h": '#include "_b.h"\n',
        "_b.h": '#include "_c.h"\n',
    }
    layers = dict.fromkeys(files, "pool") | {"_c.h": "producer"}
    assert c_problems(files, layers) == [
        "_a_more.c defines stray() for others to link to",
        "_b.c includes _a_internal.h, _a's own",
        "_b.c (pool) includes _c.h (producer)",
        "_b.h (pool) includes _c.h (producer)",
        "the extensions _b and _c include each other",
    ]


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("shmkafka.producer.client", "def f():\n    from shmkafka.sender.service import x\n"),
        ("shmkafka.pool.shared_pool", "from shmkafka.producer import futures\n"),
        ("shmkafka.protocol.records", "from shmkafka.shm.layout import X\n"),
        ("shmkafka.sender.sender", "from shmkafka.broker_stub.server import BrokerStub\n"),
        ("shmkafka.sender.sender", "from shmkafka.producer.client import Client\n"),
        ("shmkafka.sender.sender", "import shmkafka.errors\n"),
        ("shmkafka.broker_stub.server", "from shmkafka.pool import shared_pool\n"),
        ("shmkafka.pool.errors", "from shmkafka.perf.tool import run\n"),
        ("shmkafka.producer.client", "from shmkafka import sender\n"),
        ("shmkafka.producer.client", "from shmkafka.facades.confluent import producer\n"),
        ("shmkafka.producer.client", "from shmkafka import Producer\n"),
        ("shmkafka.facades.aiokafka.producer", "from shmkafka.sender import admin\n"),
        ("shmkafka.pool.shared_pool", "import shmkafka.kafka\n"),
        ("shmkafka.shm.layout", "from shmkafka.pool.config import SenderConfig\n"),
    ],
)
def test_a_wrong_way_import_is_caught(module: str, source: str) -> None:
    assert len(wrong_way(module, source)) == 1


def test_a_circle_is_caught() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


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


# the test folders filed by kind (what they test spans packages); the others mirror the source
BY_KIND = {"unit", "integration", "reliability", "soak", "conformance", "hosts", "powercut"}


def test_a_modules_tests_are_found_from_its_path() -> None:
    """``tests/<package>/test_<module>[_<aspect>].py`` tests ``shmkafka.<package>.<module>``
    (a C extension counts by its name, ``_tracker``; a model by its file's; ``test_<package>``
    the package's own ``__init__``)."""
    known = set(MODULES) | {
        f"shmkafka.{path.parent.name}.{path.stem}" for path in ROOT.glob("*/shmkafka/*/*.pml")
    }
    strays = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        folder = path.relative_to(ROOT / "tests").parent.parts
        if not folder or folder[0] in BY_KIND:
            continue
        if path.stem == f"test_{folder[-1]}":  # (the package's own __init__)
            continue
        package = "shmkafka." + ".".join(folder)
        words = path.stem.removeprefix("test_").split("_")
        names = {"_".join(words[:n]) for n in range(1, len(words) + 1)}
        if not any(f"{package}.{name}" in known or f"{package}._{name}" in known
                   for name in names):  # fmt: skip
            strays.append(str(path.relative_to(ROOT)))
    assert strays == []


def test_facades_take_only_errors_and_config_of_the_pool() -> None:
    wrong = []
    for path in (ROOT / "facades" / "shmkafka").rglob("*.py"):
        for name in imported_modules(path.read_text(encoding="utf-8")):
            if layer_of(name) == "pool" and name not in FACADE_POOL_MODULES:
                wrong.append(f"{path.relative_to(ROOT)}: {name}")
    assert wrong == []


PRIVATE_CALL = re.compile(r"\b(?:instance|producer|wrapped|self\._producer)\.(_[a-z]\w*)\(")


def test_otel_calls_no_private_method_of_a_facade() -> None:
    """otel reads a producer through its public API (``shmkafka_client`` and the client's
    PoolView), never its private methods."""
    calls = [
        f"{path.relative_to(ROOT)}: {m.group(1)}"
        for path in (ROOT / "otel" / "shmkafka").rglob("*.py")
        for m in PRIVATE_CALL.finditer(path.read_text(encoding="utf-8"))
    ]
    assert calls == []
    assert PRIVATE_CALL.search("client = instance._entry_client()")  # (the check can fail)


def test_an_app_process_imports_no_sender_library() -> None:
    """crc32c (which reads its own package metadata: email, zipfile, argparse), the codecs
    and the zigzag table cost every app process megabytes it never uses: only the Sender,
    a durable pool's commits and readers need them, and each takes them on first use."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import shmkafka.kafka, shmkafka.confluent_kafka, shmkafka.aiokafka\n"
        "from shmkafka.protocol import records\n"
        "heavy = ('crc32c', 'lz4', 'snappy', 'zstandard', 'importlib.metadata')\n"
        "print(sorted(m for m in heavy if m in sys.modules), records._zigzag.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[] 0"
