"""The SPIN model of a durable pool through a power cut (pool/durability.pml): with a cut at
every step, torn commit records and records' pages that did not reach the disk, recovery
delivers every acknowledged record exactly once; each broken rule (send before the commit,
one commit record written in place, an acknowledgement before the commit) loses or
duplicates a record, and the model finds it."""

from __future__ import annotations

from pathlib import Path

from tests.pool.test_batch_lifecycle import _check

MODEL = Path(__file__).parents[2] / "pool/shmkafka/pool/durability.pml"
CUT = ("-E",)  # (the dead host's processes stop anywhere: no invalid end states)


def test_without_a_cut_every_record_is_acknowledged_and_nothing_hangs(tmp_path: Path) -> None:
    report = _check(tmp_path, "-DNO_CUT", source=MODEL)
    assert "errors: 0" in report, report


def test_a_cut_anywhere_loses_nothing_acknowledged_and_sends_nothing_twice(
    tmp_path: Path,
) -> None:
    report = _check(tmp_path, source=MODEL, pan=CUT)
    assert "errors: 0" in report, report
    assert "depth too small" not in report, report


def test_sending_before_the_commit_writes_a_record_twice(tmp_path: Path) -> None:
    report = _check(tmp_path, "-DSEND_BEFORE_COMMIT", source=MODEL, pan=CUT)
    assert "assertion violated (logged[i]<=1)" in report, report


def test_one_commit_record_written_in_place_loses_an_acknowledged_record(
    tmp_path: Path,
) -> None:
    report = _check(tmp_path, "-DONE_COPY", source=MODEL, pan=CUT)
    assert "assertion violated (logged[i]==1)" in report, report


def test_an_acknowledgement_before_the_commit_loses_it(tmp_path: Path) -> None:
    report = _check(tmp_path, "-DACK_EARLY", source=MODEL, pan=CUT)
    assert "assertion violated (logged[i]==1)" in report, report


def test_reading_the_newest_copy_only_loses_an_acknowledged_record(tmp_path: Path) -> None:
    """The model's find: a cut keeps a commit's record but not its records' pages; the
    older copy, of a finished commit, has to be read then (recovery.py:_chosen)."""
    report = _check(tmp_path, "-DNO_FALLBACK", source=MODEL, pan=CUT)
    assert "assertion violated (logged[i]==1)" in report, report
