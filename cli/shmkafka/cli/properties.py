"""``key=value`` properties, as Kafka's command-line tools take them: ``--producer-property``
(repeatable) and files of such lines (``--producer.config``).

Rule: a secret (a password, an inline private key, an OAuth client secret) is refused on
the command line, where every user of the host reads it (``ps``, /proc/PID/cmdline); it
comes from a file only. The error names the key, never the value."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Any

from shmkafka.pool.errors import KafkaConfigurationError

# (in either client's spelling: sasl_plain_password, sasl.password, ssl.key.password,
# ssl_key_pem, sasl.oauthbearer.client.secret, ...)
SECRET_MARKS = ("password", "passphrase", "secret", "key_pem", "key.pem", "oauthbearer.config")


def key_of(line: str) -> str:
    """A line's key: the text before its first ``=``, ``:`` or blank, so that a line
    written another way (``key: value``, ``key value``) is never echoed with its value."""
    return re.split(r"[=:\s]", line.strip(), maxsplit=1)[0]


def is_secret(key: str) -> bool:
    name = key_of(key).lower()
    return any(mark in name for mark in SECRET_MARKS)


def read_properties(pairs: list[str], files: list[str]) -> dict[str, str]:
    """``key=value`` pairs from the files (``#`` comments, blank lines), then ``pairs``: the
    command line wins. A secret among ``pairs`` is a ``KafkaConfigurationError``."""
    for pair in pairs:
        if is_secret(pair):
            raise KafkaConfigurationError(
                f"{key_of(pair)} is a secret: a command line is readable by every user of the "
                "host; put it in a file only you can read, given with --producer.config"
            )
    lines = [line for name in files for line in Path(name).read_text().splitlines()]
    out: dict[str, str] = {}
    for line in [*lines, *pairs]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            shown = f"{key_of(line)}=..." if is_secret(line) else repr(line)
            raise KafkaConfigurationError(f"a property must be key=value, got {shown}")
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
