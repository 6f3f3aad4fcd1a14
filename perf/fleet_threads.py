"""Where a paced app's CPU goes, thread by thread, during the perf tool's fleet run.

    .venv/bin/python perf/fleet_threads.py [--client shmkafka] [--apps 2] [--at 22] [--span 5]

Runs ``shmkafka perf --broker tansu --fleet 500 --processes 32 --record-size 200
--duration 30 --value-kind realistic --clients CLIENT`` and, ``--at`` seconds in, reads
every thread of ``--apps`` of its app processes (the perf tool's spawned workers) from
``/proc/PID/task/*/stat`` and ``status`` twice, ``--span`` seconds apart. Prints, per
thread, its voluntary context switches (wakes) a second and its user and system CPU in ms
a second (the kernel's ticks: 10 ms steps over the span), then the run's own row.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

FLEET = ["--broker", "tansu", "--fleet", "500", "--processes", "32", "--record-size", "200",
         "--duration", "30", "--value-kind", "realistic", "--quiet"]  # fmt: skip
Snapshot = dict[tuple[int, int], tuple[float, float, int]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--client", default="shmkafka")
    parser.add_argument("--apps", type=int, default=2)
    parser.add_argument("--at", type=float, default=22.0)
    parser.add_argument("--span", type=float, default=5.0)
    args = parser.parse_args()
    tool = os.path.join(os.path.dirname(sys.executable), "shmkafka")
    run = subprocess.Popen([tool, "perf", *FLEET, "--clients", args.client],
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(args.at)
    apps = _apps(run.pid)[: args.apps]
    first = _snapshot(apps)
    time.sleep(args.span)
    second = _snapshot(apps)
    out, _ = run.communicate(timeout=600)
    ticks = os.sysconf("SC_CLK_TCK")
    for key in sorted(second.keys() & first.keys()):
        (user0, sys0, wakes0), (user1, sys1, wakes1) = first[key], second[key]
        role = "main" if key[0] == key[1] else "thread"
        print(f"app {key[0]} {role:6s} {(wakes1 - wakes0) / args.span:6.0f} wakes/s  "
              f"user {(user1 - user0) * 1000 / ticks / args.span:5.1f} ms/s  "
              f"system {(sys1 - sys0) * 1000 / ticks / args.span:4.1f} ms/s")  # fmt: skip
    print("".join(line + "\n" for line in out.splitlines() if line.startswith(args.client)))


def _apps(tool_pid: int) -> list[int]:
    """The perf tool's app processes: its children started by multiprocessing's spawn."""
    apps = []
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(path) as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(path.replace("stat", "cmdline"), "rb") as f:
                spawned = b"spawn_main" in f.read()
        except (OSError, ValueError, IndexError):
            continue
        if parent == tool_pid and spawned:
            apps.append(int(path.split("/")[2]))
    return sorted(apps)


def _snapshot(apps: list[int]) -> Snapshot:
    out: Snapshot = {}
    for pid in apps:
        for task in glob.glob(f"/proc/{pid}/task/*"):
            try:
                with open(f"{task}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"{task}/status") as f:
                    status = f.read()
            except OSError:
                continue
            wakes = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
            out[(pid, int(task.rsplit("/", 1)[1]))] = (float(fields[11]), float(fields[12]), wakes)
    return out


if __name__ == "__main__":
    main()
