"""The option tables of docs/configuration.md and docs/compatibility.md, held to the code:
each option a table names is what the code does with it (supported, shmkafka's own,
accepted and ignored, or refused), and every option the code takes is in a table. A change
to either that the other does not follow fails here."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from shmkafka.facades.confluent import config as confluent_config
from shmkafka.facades.confluent.producer import Producer
from shmkafka.facades.kafka_python import producer as kafka_python
from shmkafka.facades.kafka_python.errors import KafkaConfigurationError
from shmkafka.pool.config import SenderConfig

DOCS = Path(__file__).parents[2] / "docs"


def _table(doc: str, heading: str) -> list[tuple[str, str]]:
    """(first cell, second cell) of each row of the first table under ``heading``."""
    lines = (DOCS / doc).read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    rows: list[tuple[str, str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows.append((cells[0], cells[1]))
        elif rows and not line.startswith("|"):
            break
    return rows[1:]  # (the header row)


def _names(cell: str) -> Iterator[str]:
    """The option names of a cell: backquotes and escapes gone, a parenthesis kept apart
    (it holds aliases or values)."""
    cell = cell.replace("\\", "").replace("`", "")
    outside = cell
    while (inner := re.sub(r"\([^()]*\)", "", outside)) != outside:  # (nested ones too)
        outside = inner
    for part in outside.split(","):
        name = part.strip()
        if name and " " not in name:
            yield name


def _aliases(cell: str) -> Iterator[str]:
    for inside in re.findall(r"\(([^)]*)\)", cell.replace("`", "")):
        for part in inside.split(","):
            name = part.strip()
            if re.fullmatch(r"[a-z][a-z0-9_.]*\.[a-z0-9_.]+", name):
                yield name


# ----------------------------------------------------------------------- KafkaProducer

KAFKA_PYTHON = _table("configuration.md", "## `KafkaProducer` arguments (kafka-python 3.x)")
SENDER_FIELDS = set(SenderConfig.__dataclass_fields__)
PER_PROCESS = {"bootstrap_servers", "key_serializer", "value_serializer", "partitioner",
               "max_block_ms", "api_version", "sender_log", "pool"}  # fmt: skip


def _kafka_python_rows(status: str) -> list[str]:
    return [n for cell, s in KAFKA_PYTHON if s.startswith(status) for n in _names(cell)]


def test_every_kafka_python_argument_is_in_the_table() -> None:
    documented = {n for cell, _ in KAFKA_PYTHON for n in _names(cell)}
    taken = set(kafka_python.DEFAULTS) | kafka_python.IGNORED
    assert taken - documented == set(), "taken by the code, in no row"
    assert documented - taken == set(), "in a row, not taken by the code"


def test_supported_kafka_python_arguments_drive_a_setting() -> None:
    for name in _kafka_python_rows("supported, Sender-level"):
        assert (
            name in kafka_python.SENDER_ARGS
            or name in SENDER_FIELDS
            or name
            in {
                "sasl_plain_username",
                "sasl_plain_password",
                "sasl_oauth_token_provider",
            }
        ), name  # (the two kafka-python names the Sender calls sasl_username/password)
        assert name not in kafka_python.IGNORED
    for name in _kafka_python_rows("supported, pool sizes"):
        assert name in kafka_python.POOL_ARGS, name
    for name in _kafka_python_rows("supported, per process"):
        assert name in PER_PROCESS and name not in kafka_python.SENDER_ARGS, name
    for name in _kafka_python_rows("shmkafka's own"):
        assert name in kafka_python.POOL_ARGS or name in {"pool", "sender_log"}, name


def test_kafka_python_arguments_accepted_and_ignored_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ignored = _kafka_python_rows("accepted and ignored")
    assert set(ignored) == kafka_python.IGNORED
    kafka_python._logged_ignored.clear()
    with caplog.at_level(logging.INFO, logger="shmkafka.producer"):
        kafka_python.log_ignored_once(ignored, "KafkaProducer")
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert all(name in logged for name in ignored)
    for name in ignored:
        kafka_python.resolved_config({name: None})  # accepted


def test_kafka_python_refusals_are_refused() -> None:
    for name in _kafka_python_rows("refused"):
        with pytest.raises(KafkaConfigurationError):
            kafka_python.settings_for({name: object()})
    (anything_else,) = [s for c, s in KAFKA_PYTHON if c == "anything else"]
    assert "KafkaConfigurationError" in anything_else
    with pytest.raises(KafkaConfigurationError, match="did you mean 'linger_ms'"):
        kafka_python.settings_for({"linger_msec": 5})
    with pytest.raises(KafkaConfigurationError, match="security_protocol"):
        kafka_python.settings_for({"security_protocol": "KERBEROS"})


def test_kafka_python_secured_protocols_are_supported() -> None:
    for protocol in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        extra = {"sasl_mechanism": "PLAIN", "sasl_plain_username": "u",
                 "sasl_plain_password": "p"} if "SASL" in protocol else {}  # fmt: skip
        sender = kafka_python.settings_for({"security_protocol": protocol, **extra}).sender
        assert sender.security_protocol == protocol


# ----------------------------------------------------------------------- Producer

CONFLUENT = _table("configuration.md", "## `Producer` properties (confluent-kafka / librdkafka)")
PYTHON_ONLY = {"on_delivery", "error_cb", "stats_cb", "logger", "throttle_cb", "oauth_cb",
               "delivery.report.only.error"}  # fmt: skip
OWN = {
    "shmkafka.pool", "shmkafka.max.topics", "shmkafka.max.partitions", "shmkafka.max.processes",
    "shmkafka.sender.log", "shmkafka.metadata.max.idle.ms", "shmkafka.pool.dir",
    "shmkafka.pool.durability", "shmkafka.pool.flush.ms",
}  # fmt: skip
OWN_VALUES = {"shmkafka.pool": "web", "shmkafka.sender.log": "web", "shmkafka.pool.dir": "/d",
              "shmkafka.pool.durability": "sync"}  # fmt: skip
POOL_SETTINGS = {"batch_size", "batch_max_records", "buffer_kbytes"}
PER_PROCESS_SETTINGS = {"max_messages", "partitioner", "statistics_interval_ms"}


def _canonical(name: str) -> str:
    return confluent_config._lookup(name).name


def _confluent_rows(status: str) -> list[str]:
    rows = [(cell, s) for cell, s in CONFLUENT if s.startswith(status)]
    return [n for cell, _ in rows for n in [*_names(cell), *_aliases(cell)] if "*" not in n]


def test_supported_confluent_properties_drive_a_setting() -> None:
    for name in _confluent_rows("supported, Sender-level"):
        if name in PYTHON_ONLY:
            continue  # (oauth_cb: the app process answers the Sender's token board)
        setting = confluent_config.SETTINGS.get(_canonical(name))
        assert (
            setting in SENDER_FIELDS
            or setting in confluent_config.SECURITY_KEYS
            or (setting == "buffer_kbytes")
        ), (name, setting)
    for name in _confluent_rows("supported, pool sizes"):
        assert confluent_config.SETTINGS.get(_canonical(name)) in POOL_SETTINGS, name
    for name in _confluent_rows("supported, per process"):
        if name in PYTHON_ONLY:
            continue
        assert confluent_config.SETTINGS.get(_canonical(name)) in PER_PROCESS_SETTINGS, name


def test_the_sender_level_confluent_settings_reach_the_sender() -> None:
    settings, _, _ = confluent_config.parse({"bootstrap.servers": "h:1"})
    sender = confluent_config.sender_settings({**settings, "pool": None})
    assert set(sender) <= SENDER_FIELDS


def test_shmkafkas_own_properties_are_taken() -> None:
    documented = set(_confluent_rows("shmkafka's own"))
    assert documented == OWN
    for name in documented:
        _, ignored, _ = confluent_config.parse({name: OWN_VALUES.get(name, "5")})
        assert ignored == [], name


def test_properties_without_effect_are_reported_as_such() -> None:
    (cell,) = [c for c, s in CONFLUENT if s.startswith("checked, accepted, and logged once")]
    examples = [
        n
        for n in re.findall(r"[a-z]+(?:\.[a-z]+)+|\bdebug\b", cell)
        if f"{n}.\\*" not in cell  # (a family of properties, not one)
    ]
    assert examples, cell
    values = {"debug": "all", "log_level": "3", "sticky.partitioning.linger.ms": "10"}
    for name in examples:
        prop = confluent_config._lookup(name)
        assert prop.name not in confluent_config.SETTINGS, name
        if name in values:
            _, ignored, _ = confluent_config.parse({name: values[name]})
            assert ignored == [name]


def test_consumer_properties_are_logged_and_callbacks_refused() -> None:
    _, ignored, warnings = confluent_config.parse({"group.id": "g"})
    assert ignored == [] and "consumer property" in warnings[0]
    (refused,) = [c for c, s in CONFLUENT if s.startswith("refused, as librdkafka")]
    for name in _names(refused.split(" and ")[0]):
        with pytest.raises(confluent_config.ConfigError) as raised:
            confluent_config.parse({name: print})
        assert "must be set through dedicated" in str(raised.value), name


def test_security_properties_are_supported_for_every_protocol() -> None:
    for protocol in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        extra = {"sasl.mechanisms": "PLAIN", "sasl.username": "u",
                 "sasl.password": "p"} if "SASL" in protocol else {}  # fmt: skip
        settings, ignored, _ = confluent_config.parse({"security.protocol": protocol, **extra})
        assert settings["security_protocol"] == protocol and ignored == []


# ----------------------------------------------------------------------- compatibility.md

CONFLUENT_METHODS = _table("compatibility.md", "## `Producer` (confluent-kafka 2.15)")


def test_every_confluent_method_in_the_table_exists() -> None:
    """Each method the confluent table names is one of our Producer's."""
    methods = {
        m.group(1) for cell, _ in CONFLUENT_METHODS for m in re.finditer(r"`([a-z_]+)\(", cell)
    }
    assert {"produce", "flush", "poll", "set_sasl_credentials", "purge"} <= methods
    dunder = {"len": "__len__", "bool": "__bool__"}
    for name in methods - {"Producer"}:
        assert callable(getattr(Producer, dunder.get(name, name), None)), name
