"""The SPIN model of the batch lifecycle and the delivery of results
(pool/batch_lifecycle.pml), checked under every interleaving of two appenders, their
completion threads, the Sender and one SIGKILL of the Sender: the code's protocol holds
its four properties, and the model of the old tracker does not (it hangs, and with the
liveness check the check fires: the bug of the make demo hang).

spin is Debian's package ``spin``; ``make test`` installs it (as root) or says how. A
machine without it fails here, never skips."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

MODEL = Path(__file__).parents[2] / "pool/shmkafka/pool/batch_lifecycle.pml"
BOUND_S = 600


def _check(tmp_path: Path, *defines: str, source: Path = MODEL, pan: tuple[str, ...] = ()) -> str:
    """spin's verifier's report for the model ``source`` with ``defines`` (and the
    verifier's own ``pan`` flags)."""
    spin, cc = shutil.which("spin"), shutil.which("gcc") or shutil.which("cc")
    if spin is None or cc is None:
        pytest.fail("the model check needs spin and gcc: apt-get install spin gcc")
    model = tmp_path / source.name
    shutil.copy(source, model)
    subprocess.run([spin, "-a", *defines, model.name], cwd=tmp_path, check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    subprocess.run([cc, "-O2", "-w", "-DSAFETY", "-DCOLLAPSE", "-o", "pan", "pan.c"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)  # fmt: skip
    run = subprocess.run(["./pan", "-m100000", *pan], cwd=tmp_path, capture_output=True, text=True,
                         timeout=BOUND_S)  # fmt: skip
    return run.stdout


def test_the_protocol_holds_every_property(tmp_path: Path) -> None:
    report = _check(tmp_path)
    assert "errors: 0" in report, report
    assert "depth too small" not in report, report
    completer = report.split("unreached in proctype Completer")[1].split("states)")[0]
    assert '"assert((internal_errors==0))"' in completer  # the check never fails a record


def test_the_old_tracker_hangs_a_flush(tmp_path: Path) -> None:
    """Without the liveness check, the old tracker's lost wait leaves a flush waiting for
    ever: an invalid end state (P3)."""
    report = _check(tmp_path, "-DOLD_TRACKER", "-DNO_CHECK")
    assert "pan:1: invalid end state" in report, report


def test_the_liveness_check_catches_the_old_trackers_lost_result(tmp_path: Path) -> None:
    """With the check, the old tracker's record gets a result after all, but only from the
    check: a lost result (P4)."""
    report = _check(tmp_path, "-DOLD_TRACKER")
    assert "pan:1: assertion violated (internal_errors==0)" in report, report


@pytest.mark.stress
def test_the_protocol_holds_with_more_records(tmp_path: Path) -> None:
    """Two records from the first appender (about 3 minutes): it appends to a batch it
    opened, and a batch is reused while the other's result is on its way."""
    report = _check(tmp_path, "-DNREC0=2")
    assert "errors: 0" in report, report
