"""Modules of one concept: no product file (Python or C, every source root) is over 600
lines, and no function over 80."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.unit.test_imports import ROOT, SOURCE_ROOTS

MAX_LINES, MAX_FUNCTION = 600, 80
# a C function in PEP 7's style: its name at column 0 after its type's line, to the first
# closing brace at column 0
C_FUNCTION = re.compile(r"^[A-Za-z_][^\n;]*\n([A-Za-z_]\w*)\([^;{]*?\)\n\{\n.*?^\}", re.M | re.S)


def sources(*suffixes: str) -> list[Path]:
    return sorted(
        path for root in SOURCE_ROOTS for path in (ROOT / root).rglob("*")
        if path.suffix in suffixes
    )  # fmt: skip


def long_functions(path: Path) -> list[str]:
    text = path.read_text()
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    if path.suffix == ".py":
        return [
            f"{name}: {node.name} ({node.end_lineno - node.lineno + 1})"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (node.end_lineno or 0) - node.lineno + 1 > MAX_FUNCTION
        ]
    return [
        f"{name}: {match[1]} ({match[0].count(chr(10))})"  # (from its name's line)
        for match in C_FUNCTION.finditer(text)
        if match[0].count("\n") > MAX_FUNCTION
    ]


def test_no_module_is_over_600_lines() -> None:
    files = sources(".py", ".c", ".h", ".pml")
    assert len(files) > 150
    long = [f"{p.relative_to(ROOT)} ({n})" for p in files
            if (n := len(p.read_text().splitlines())) > MAX_LINES]  # fmt: skip
    assert long == []


def test_no_function_is_over_80_lines() -> None:
    files = sources(".py", ".c")
    assert sum(len(C_FUNCTION.findall(p.read_text())) for p in files if p.suffix == ".c") > 80
    assert [line for path in files for line in long_functions(path)] == []


def test_a_long_c_function_is_caught(tmp_path: Path) -> None:
    body = "".join(f"    x += {i};\n" for i in range(MAX_FUNCTION))
    source = tmp_path / "long.c"
    source.write_text(f"static int\nlong_one(void)\n{{\n{body}}}\n\nint\nshort_one(void)\n{{\n}}\n")
    assert [line.split(": ")[1] for line in long_functions(source)] == ["long_one (83)"]
