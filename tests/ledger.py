"""A tally of what the reliability tests checked, for the figures in docs/reliability.md.

A test calls ``note`` once its assertions have passed (so a note means: no record lost, none
duplicated, order held, nothing hung). With ``SHMKAFKA_LEDGER`` naming a file, each note is
appended to it as one JSON line (xdist workers share the file; one short write each).
``python -m tests.ledger FILE`` prints the totals; ``make test`` and ``make stress`` do.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict

FIELDS = ("sender_kills", "app_kills", "kill_trials", "records", "power_cuts")


def note(test: str, cases: tuple[int, ...] = (), **counts: int) -> None:
    path = os.environ.get("SHMKAFKA_LEDGER")
    if not path:
        return
    unknown = set(counts) - set(FIELDS)
    assert not unknown, f"unknown ledger fields {unknown}"
    line = json.dumps({"test": test, "cases": list(cases), **counts}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def summary(path: str) -> str:
    totals: dict[str, int] = defaultdict(int)
    cases: set[int] = set()
    tests = 0
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                entry = json.loads(line)
                tests += 1
                cases.update(entry["cases"])
                for field in FIELDS:
                    totals[field] += entry.get(field, 0)
    return (
        f"reliability ledger ({tests} notes): {len(cases)} of 38 catalogue cases passed, "
        f"{totals['sender_kills']} Sender SIGKILLs and {totals['app_kills']} app SIGKILLs "
        f"survived, {totals['power_cuts']} power cuts, {totals['kill_trials']:,} shared-memory "
        "kill trials, "
        f"{totals['records']:,} records read back and checked: 0 lost, 0 duplicated, 0 hangs"
    )


if __name__ == "__main__":
    print(summary(sys.argv[1]))
