"""cli/properties.py: ``key=value`` properties from files and the command line, and secrets
refused on the command line (every user of the host reads it) in either client's spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

from shmkafka.cli import main
from shmkafka.cli.properties import is_secret, literal, read_properties
from shmkafka.pool.errors import KafkaConfigurationError

SECRET_KEYS = (
    "sasl_plain_password", "sasl.password", "ssl_password", "ssl.key.password",
    "ssl_key_pem", "ssl.key.pem", "sasl.oauthbearer.client.secret", " SASL.Password ",
    "ssl.keystore.password", "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.config",
)  # fmt: skip


def test_the_command_line_wins_over_the_files(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("# a comment\n\nacks=1\nlinger.ms = 5\n")
    assert read_properties(["acks=all"], [str(config)]) == {"acks": "all", "linger.ms": "5"}


def test_a_line_without_a_value_is_refused() -> None:
    with pytest.raises(KafkaConfigurationError, match="must be key=value, got 'acks'"):
        read_properties(["acks"], [])


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_secret_on_the_command_line_is_refused_without_its_value(key: str) -> None:
    assert is_secret(key)
    with pytest.raises(KafkaConfigurationError) as caught:
        read_properties([f"{key}=hunter2-secret-value"], [])
    assert "hunter2" not in str(caught.value)
    assert f"{key.strip()} is a secret: a command line is readable" in str(caught.value)
    assert "--producer.config" in str(caught.value)


@pytest.mark.parametrize("written", ["sasl.password:hunter2", "sasl.password hunter2",
                                     "sasl.password\thunter2"])  # fmt: skip
def test_a_secret_written_without_an_equals_sign_is_never_echoed(
    tmp_path: Path, written: str
) -> None:
    with pytest.raises(KafkaConfigurationError) as caught:
        read_properties([written], [])
    assert "hunter2" not in str(caught.value) and "sasl.password is a secret" in str(caught.value)
    config = tmp_path / "client.properties"
    config.write_text(written + "\n")
    with pytest.raises(KafkaConfigurationError) as caught:
        read_properties([], [str(config)])
    assert "hunter2" not in str(caught.value)
    assert "must be key=value, got sasl.password=..." in str(caught.value)


@pytest.mark.parametrize("command", ["doctor", "sender --create --pool p --bootstrap-server h:1",
                                     "produce --topic t --bootstrap-server h:1"])  # fmt: skip
def test_each_command_refuses_a_secret_on_its_command_line(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*command.split(), "--producer-property", "sasl_plain_password=hunter2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sasl_plain_password is a secret" in err and "hunter2" not in err


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_secret_from_a_file_is_read(tmp_path: Path, key: str) -> None:
    config = tmp_path / "client.properties"
    config.write_text(f"{key}=hunter2\n")
    assert read_properties([], [str(config)]) == {key.strip(): "hunter2"}


@pytest.mark.parametrize("key", ["sasl_plain_username", "ssl_cafile", "sasl.mechanism",
                                 "ssl.certificate.location", "acks"])  # fmt: skip
def test_settings_that_are_not_secret_pass_on_the_command_line(key: str) -> None:
    assert not is_secret(key)
    assert read_properties([f"{key}=x"], []) == {key: "x"}


def test_a_value_reads_as_python_where_it_can() -> None:
    assert literal("5") == 5 and literal("[1, 2]") == [1, 2]
    assert literal("true") is True and literal("None") is None and literal("all") == "all"


def test_the_senders_inline_config_json_refuses_secrets_and_stdin_takes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    import json

    from shmkafka.sender.__main__ import build_parser, config_from_args

    fields = {"bootstrap_servers": ["h:1"], "sasl_password": "hunter2"}
    inline = build_parser().parse_args(["--pool", "p", "--config-json", json.dumps(fields)])
    with pytest.raises(KafkaConfigurationError) as caught:
        config_from_args(inline)
    assert "sasl_password in --config-json on the command line" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(fields)))
    piped = build_parser().parse_args(["--pool", "p", "--config-json", "-"])
    assert config_from_args(piped).sasl_password == "hunter2"
