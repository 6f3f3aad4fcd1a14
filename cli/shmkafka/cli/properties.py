"""``key=value`` properties, as Kafka's command-line tools take them: ``--producer-property``
(repeatable) and files of such lines (``--producer.config``)."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import Any

from shmkafka.pool.errors import KafkaConfigurationError


def read_properties(pairs: list[str], files: list[str]) -> dict[str, str]:
    """``key=value`` pairs from the files (``#`` comments, blank lines), then ``pairs``: the
    command line wins."""
    lines = [line for name in files for line in Path(name).read_text().splitlines()]
    out: dict[str, str] = {}
    for line in [*lines, *pairs]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise KafkaConfigurationError(f"a property must be key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def literal(text: str) -> Any:
    """A property's value as a Python value where it reads as one (``5``, ``True``,
    ``[1, 2]``; ``true``/``false``/``none`` too), else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def add_property_arguments(parser: argparse.ArgumentParser, example: str, note: str = "") -> None:
    """``--producer-property KEY=VALUE`` (repeatable) and ``--producer.config FILE``;
    ``note`` (e.g. "with --create") goes into their help."""
    prefix = f"{note}; " if note else ""
    parser.add_argument(
        "--producer-property", action="append", default=[], metavar="KEY=VALUE",
        help=f"a producer setting, e.g. {example} ({prefix}repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--producer.config", dest="producer_config", action="append", default=[],
        metavar="FILE", help="a file of KEY=VALUE lines" + (f" ({note})" if note else ""),
    )  # fmt: skip
