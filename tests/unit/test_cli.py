from __future__ import annotations

import subprocess
import sys

import pytest

from shmkafka import __version__
from shmkafka.cli import main


def test_version_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == f"shmkafka {__version__}"


def test_no_subcommand_prints_usage_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: shmkafka" in capsys.readouterr().err


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "shmkafka", "version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"shmkafka {__version__}"
