from __future__ import annotations

import argparse
import importlib
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shmkafka import __version__
from shmkafka.cli import COMMANDS, main
from shmkafka.pool.accumulator import RecordAccumulator
from shmkafka.pool.shared_pool import SharedPool


def test_version_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"shmkafka {__version__}",
                                                    "C extension: built"]  # fmt: skip


def test_no_subcommand_prints_usage_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: shmkafka" in capsys.readouterr().err


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "shmkafka", "version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.splitlines()[0] == f"shmkafka {__version__}"


def test_stat_of_a_missing_pool_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stat", "--pool", "nosuch-pool-x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no pool named 'nosuch-pool-x'" in err


def test_stat_lists_a_pool_it_cannot_read_as_such(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shmkafka.pool.stat
    import shmkafka.shm.segment

    def refused(name: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(shmkafka.shm.segment, "list_pools", lambda: ["theirs"])
    monkeypatch.setattr(shmkafka.pool.stat, "pool_stat", refused)
    assert main(["stat"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "pool theirs: another user's pool"


def test_cleanup_names_only_what_it_removed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shmkafka.pool.cleanup as cleanup

    results = [cleanup.CleanupResult("gone", True, "every process of it is dead"),
               cleanup.CleanupResult("busy", False, "in use by pid 1")]  # fmt: skip
    monkeypatch.setattr(cleanup, "cleanup", lambda pool=None: results)
    assert main(["cleanup"]) == 0
    assert capsys.readouterr().out.splitlines() == ["removed gone: every process of it is dead"]
    assert main(["cleanup", "--verbose"]) == 0
    assert "kept busy: in use by pid 1" in capsys.readouterr().out


def test_broker_stub_control_lists_its_operations(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["broker-stub-control", "--help"])
    out = capsys.readouterr().out
    assert "fail_produce" in out and "kill_node" in out and "control port is" in out


def test_a_platform_without_posix_shared_memory_is_told_at_import() -> None:
    code = "import sys; sys.platform = 'darwin'; import shmkafka"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert "ImportError: shmkafka runs on Linux only" in out.stderr.splitlines()[-1]


def test_without_the_c_extension_the_first_use_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str], pool: SharedPool, tmp_path: Path,
) -> None:  # fmt: skip
    from shmkafka.pool import fastpath

    monkeypatch.setattr(fastpath, "FastAppend", None)
    monkeypatch.setattr(fastpath, "_warned_not_built", False)
    with caplog.at_level(logging.WARNING, logger="shmkafka.producer"):
        # a Sender's drain does not warn (it sends nothing); a producer's first use does
        assert RecordAccumulator(pool, fast_path=False, c_drain=True)._drain_fast is None
        assert not caplog.records
        assert fastpath.fast_path_for(pool) is None
        assert fastpath.fast_path_for(pool) is None
    warned = [r.getMessage() for r in caplog.records if "C extension was not built" in r.message]
    assert len(warned) == 1
    import shmkafka

    monkeypatch.setattr(shmkafka, "__path__", [str(tmp_path)])  # (no _append there)
    assert main(["version"]) == 0
    assert "C extension: NOT built" in capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_help_shows_every_default(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each option that has a default (not None, False, "" or []) names it in its own entry
    of --help."""
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    entries = _help_entries(capsys.readouterr().out)
    module = importlib.import_module(COMMANDS[command].module)
    parser = getattr(module, COMMANDS[command].arguments)(argparse.ArgumentParser())
    for action in parser._actions:
        if action.option_strings and action.default not in (None, False, "", [], "==SUPPRESS=="):
            entry = entries[action.option_strings[0]]
            shown = re.compile(rf"default: {re.escape(str(action.default))}\b")
            assert shown.search(entry), f"{command} {action.option_strings[0]}: {entry!r}"


def _help_entries(text: str) -> dict[str, str]:
    """Each option's entry under "options:", by its first option string, in one line."""
    entries: dict[str, str] = {}
    current = None
    for line in text.split("options:", 1)[1].splitlines():
        if line.startswith("  -"):
            current = line.split()[0].rstrip(",")
            entries[current] = line
        elif current is not None:
            entries[current] += " " + line.strip()
    return {option: " ".join(entry.split()) for option, entry in entries.items()}
