"""What importing a client costs an app process in memory: its PSS (the proportional set
size, /proc/self/smaps_rollup) before and after the import, in a fresh interpreter each,
every client measured the same way in the same run.

    .venv/bin/python perf/bench_import_memory.py [--runs 3]

A paced fleet of 32 processes pays it 32 times: a megabyte here is 32 MB of the fleet's
PSS. The heavy libraries only the Sender needs (crc32c, the codecs) must not be among
what an app imports (tests/unit/test_imports.py holds that).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

IMPORTS = {
    "shmkafka (kafka-python API)": "import shmkafka.kafka",
    "shmkafka (confluent-kafka API)": "import shmkafka.confluent_kafka",
    "shmkafka (aiokafka API)": "import shmkafka.aiokafka",
    "confluent-kafka": "import confluent_kafka",
    "kafka-python": "import kafka",
}
PROBE = """
def pss():
    with open('/proc/self/smaps_rollup') as f:
        return next(int(line.split()[1]) for line in f if line.startswith('Pss:'))
before = pss()
{statement}
print(pss() - before)
"""


def import_kib(statement: str) -> int | None:
    """KiB of PSS the import adds; None if it fails (the library is not installed)."""
    code = PROBE.format(statement=statement)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(out.stdout.split()[-1]) if out.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per client")
    args = parser.parse_args()
    print(f"{'client':32} {'PSS added by the import, MiB (each run)':>40}")
    for name, statement in IMPORTS.items():
        runs = [import_kib(statement) for _ in range(args.runs)]
        shown = "  ".join("   n/a" if r is None else f"{r / 1024:6.1f}" for r in runs)
        print(f"{name:32} {shown:>40}")


if __name__ == "__main__":
    main()
