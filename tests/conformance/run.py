"""`make conformance`: kafka-python 3.0.11's own producer integration tests, unchanged, run
twice on Tansu: with kafka-python's ``KafkaProducer`` and with ``shmkafka.KafkaProducer``.

    python -m tests.conformance.run [--variant both|shmkafka|kafka-python] [-k EXPR]
                                    [--sequential] [--timeout S] [--with-consumer-tests]

What it does:
1. Downloads the pinned sdist from PyPI once (``pip download --no-deps --no-binary :all:``)
   into ``.conformance/dist`` (git-ignored), checks its sha256 and unpacks it.
2. Builds ``.conformance/run/``: kafka-python's test files copied byte for byte from the
   sdist, plus an empty ``test/__init__.py`` (the sdist omits it; without it ``test``
   resolves to the standard library's package), our kafka_python_conftest.py as
   ``conftest.py`` and a ``pytest.ini`` (so the project's pytest settings stay out).
3. Runs pytest on them once per variant (in parallel by default), each in its own process
   with its own Tansu (or, ``--broker broker_stub``, shmkafka's test broker: its
   transaction coordinator hides aborted records from read_committed consumers and serves
   the group offsets a transaction committed, which Tansu does not). The conftest swaps the
   producer class for the shmkafka variant.
4. Prints each test's result in both runs and the totals, and exits 1 if a test that passes
   with kafka-python does not pass with shmkafka, unless it is listed in
   ``EXPECTED_DIFFERENCES`` below.

kafka-python itself: the baseline is 3.0.11, the version of the tests, not the 3.0.12 of
the venv. kafka-python is pure Python and its sdist holds the whole ``kafka`` package
(schema JSON files included), so the unpacked sdist goes first on PYTHONPATH for both runs;
nothing is built or installed. Both runs thus use the same kafka-python 3.0.11 for what the
tests need besides the producer (consumers, admin client, serializers).

Test files of the sdist not run here, and why:
- test/producer/ (test_kip679_config.py, test_partitioner.py, test_producer.py, ...) is
  not in the sdist, nor are test/conftest.py, test/__init__.py and test/service.py: it
  holds only what setuptools adds by itself (test/test*.py, and the test/ subfolders that
  are packages: integration/, net/). This machine reaches PyPI only.
- test/test_serializer.py, test_future.py, test_codec.py, test_util.py: they test
  kafka-python's own modules (``kafka.serializer``, ``kafka.future``...) directly, never
  through ``KafkaProducer``: nothing of shmkafka would run.
- test/integration/test_consumer_integration.py uses the producer fixtures only to seed
  topics for consumer tests, and takes about 2 minutes a run: only with
  ``--with-consumer-tests``. test_admin/sasl/ssl_integration.py do not produce.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(os.environ.get("SHMKAFKA_CONFORMANCE_DIR", ROOT / ".conformance"))
VERSION = "3.0.11"
SDIST = f"kafka_python-{VERSION}.tar.gz"
SDIST_SHA256 = "a003d927e79c801d6cfd1e59ceaaf78807351e75cdb5b8ee9ce4262586f9780f"
# kafka-python 3.0.11 detects Tansu (0.6) as api_version (3, 9). Their tests read it from
# KAFKA_VERSION for skips and pass it as api_version to every client they make.
KAFKA_VERSION = "3.9.0"

# Copied unchanged from the sdist: the test files, and what they and their conftest import.
SUPPORT = (
    "test/testutil.py",
    "test/integration/__init__.py",
    "test/integration/conftest.py",
    "test/integration/fixtures.py",
)
TEST_FILES = ("test/integration/test_producer_integration.py",)
# --with-consumer-tests: consumer tests that seed their topics with the producer fixtures
# (so with shmkafka's producer in that run). About 2 minutes per run, hence not by default.
CONSUMER_TEST_FILES = ("test/integration/test_consumer_integration.py",)
VARIANTS = ("kafka-python", "shmkafka")

# Tests allowed to pass with kafka-python and not with shmkafka: documented non-goals only.
# Key: the test's name (after "::"); value: why.
EXPECTED_DIFFERENCES: dict[str, str] = {}
# The transactional tests need a read_committed consumer to skip aborted records and the
# group's offsets read back with their leader epoch: Tansu 0.6 does neither (both producers
# fail them there), broker_stub does both, so `make conformance` runs them on it as well.


# --------------------------------------------------------------- the sdist


def fetch_sdist() -> Path:
    """The unpacked sdist (downloaded and unpacked once, then cached)."""
    dist = WORK / "dist"
    archive = dist / SDIST
    if not archive.exists():
        dist.mkdir(parents=True, exist_ok=True)
        print(f"conformance: downloading kafka-python=={VERSION} (sdist) from PyPI")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
             ":all:", f"kafka-python=={VERSION}", "-d", str(dist)],
            check=True,
        )  # fmt: skip
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"conformance: {archive} has sha256 {digest}, expected {SDIST_SHA256}")
    source = WORK / "src" / f"kafka_python-{VERSION}"
    if not (source / "kafka" / "__init__.py").exists():
        shutil.rmtree(WORK / "src", ignore_errors=True)
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(WORK / "src", filter="data")
            else:  # Python < 3.10.12: the archive's sha256 is pinned above
                tar.extractall(WORK / "src")
    return source


def build_tree(source: Path, test_files: tuple[str, ...]) -> Path:
    """A fresh run directory: their files unchanged, our conftest and ini beside them."""
    run = WORK / "run"
    shutil.rmtree(run, ignore_errors=True)
    for name in (*SUPPORT, *test_files):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, run / name)
        assert (run / name).read_bytes() == (source / name).read_bytes()
    (run / "test" / "__init__.py").write_text("")
    shutil.copyfile(Path(__file__).with_name("kafka_python_conftest.py"), run / "conftest.py")
    (run / "pytest.ini").write_text(
        textwrap.dedent("""\
            [pytest]
            addopts = -p no:cacheprovider -ra
            faulthandler_timeout = 120
            # kafka-python 3.0.11's schema loader, 218 times a run
            filterwarnings =
                ignore:read_text is deprecated:DeprecationWarning
                ignore:open_text is deprecated:DeprecationWarning
        """)
    )
    (run / "kafka-root").mkdir()  # KAFKA_ROOT: must exist; unused with an external broker
    return run


# --------------------------------------------------------------- one run


def run_variant(
    variant: str,
    run: Path,
    source: Path,
    test_files: tuple[str, ...],
    keyword: str | None,
    timeout: float,
    broker: str = "tansu",
) -> dict:
    report = WORK / f"report-{variant}.json"
    log = WORK / f"{variant}.log"
    for path in (report, Path(f"{report}.broker")):
        path.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(source), str(ROOT)]),
        "KAFKA_VERSION": KAFKA_VERSION,
        "KAFKA_ROOT": str(run / "kafka-root"),
        "SHMKAFKA_CONFORMANCE_PRODUCER": variant,
        "SHMKAFKA_CONFORMANCE_BROKER": broker,
        "SHMKAFKA_CONFORMANCE_REPORT": str(report),
        "SHMKAFKA_CONFORMANCE_KAFKA_VERSION": VERSION,
        "SHMKAFKA_SENDER_IDLE_EXIT_MS": "300",  # Senders leave soon after their last producer
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("KAFKA_URI", None)
    env.pop("ZOOKEEPER_URI", None)
    command = [sys.executable, "-m", "pytest", *test_files]
    if keyword:
        command += ["-k", keyword]
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            command, cwd=run, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, Tansu included
        )  # fmt: skip
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = -1
            broker = Path(f"{report}.broker")
            if broker.exists():
                reap_senders(broker.read_text().strip(), grace_s=0)
    data: dict = {"variant": variant, "results": {}}
    if report.exists():
        data = json.loads(report.read_text())
    data.update(exit_code=code, log=str(log), wall_s=round(time.monotonic() - started, 1))
    return data


def reap_senders(bootstrap: str, grace_s: float) -> list[str]:
    """The shmkafka Senders of one run (those connected to its broker's address): wait up
    to ``grace_s`` for them to go idle and exit, then end the rest by pid and remove their
    pools. Returns what it had to do."""
    import psutil

    port = int(bootstrap.rsplit(":", 1)[1])

    def talks_to_broker(proc: psutil.Process) -> bool:
        try:
            return any(c.raddr and c.raddr.port == port for c in proc.net_connections("tcp"))
        except psutil.Error:
            return False

    def senders() -> dict[int, tuple[psutil.Process, str]]:
        found = {}
        for p in psutil.process_iter(["cmdline", "uids"]):
            cmd = p.info["cmdline"] or []
            if (
                "shmkafka.sender" in cmd
                and "--pool" in cmd
                and p.info["uids"].real == os.getuid()
                and talks_to_broker(p)
            ):
                found[p.pid] = (p, cmd[cmd.index("--pool") + 1])
        return found

    deadline = time.monotonic() + grace_s
    left = senders()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = senders()
    done = []
    for pid, (proc, pool) in left.items():
        try:
            proc.terminate()
            proc.wait(5)
        except psutil.TimeoutExpired:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
        subprocess.run([sys.executable, "-m", "shmkafka", "cleanup", "--pool", pool], check=False)
        done.append(f"ended Sender {pid} of pool {pool} (still running {grace_s} s after the run)")
    return done


# --------------------------------------------------------------- the table


def short(nodeid: str) -> str:
    return nodeid.split("::", 1)[-1]


def compare(runs: dict[str, dict]) -> int:
    base, ours = runs.get("kafka-python"), runs.get("shmkafka")
    problems = []
    for variant, data in runs.items():
        if not data["results"]:
            problems.append(
                f"{variant}: no results (pytest exit {data['exit_code']}); see {data['log']}"
            )
        elif data["exit_code"] not in (0, 1):
            problems.append(f"{variant}: pytest exit {data['exit_code']}; see {data['log']}")
    ids = list(dict.fromkeys(n for data in runs.values() for n in data["results"]))
    width = max([len(short(n)) for n in ids] + [10])
    print()
    print(f"{'test':<{width}}  {'kafka-python':<12}  {'shmkafka':<12}")
    print(f"{'-' * width}  {'-' * 12}  {'-' * 12}")
    regressions, excused = [], []
    for nodeid in ids:
        got = {v: d["results"].get(nodeid, {}).get("outcome", "-") for v, d in runs.items()}
        line = f"{short(nodeid):<{width}}  {got.get('kafka-python', ''):<12}  "
        line += f"{got.get('shmkafka', ''):<12}"
        if base and ours and got["kafka-python"] == "passed" and got["shmkafka"] != "passed":
            name = short(nodeid).split("[")[0]
            if name in EXPECTED_DIFFERENCES:
                excused.append(nodeid)
                line += f"  (expected: {EXPECTED_DIFFERENCES[name]})"
            else:
                regressions.append(nodeid)
                line += "  <-- REGRESSION"
        print(line)
    print()
    for variant, data in runs.items():
        failed = {n: r for n, r in data["results"].items() if r["outcome"] in ("failed", "error")}
        if failed:
            print(f"{variant}: not passed")
            for nodeid, r in failed.items():
                message = r["message"].strip().splitlines()[0] if r["message"].strip() else ""
                print(f"  {short(nodeid)}: {message[:300]}")
            print()
    totals = []
    for variant in VARIANTS:
        if variant in runs:
            results = runs[variant]["results"]
            passed = sum(r["outcome"] == "passed" for r in results.values())
            skipped = sum(r["outcome"] == "skipped" for r in results.values())
            note = f" ({skipped} skipped)" if skipped else ""
            totals.append(f"{variant} {passed}/{len(ids)}{note}")
            print(
                f"{variant}: producer {runs[variant].get('producer', '?')}, kafka-python "
                f"{runs[variant].get('kafka_python', '?')}, pytest {runs[variant]['wall_s']} s, "
                f"log {runs[variant]['log']}"
            )
    print()
    print("conformance: " + " vs ".join(totals[::-1]))
    if excused:
        print(f"conformance: {len(excused)} expected difference(s) (EXPECTED_DIFFERENCES)")
    stale = [
        name
        for name in EXPECTED_DIFFERENCES
        if ours and any(
            short(n).split("[")[0] == name and r["outcome"] == "passed"
            for n, r in ours["results"].items()
        )
    ]  # fmt: skip
    if stale:
        print(f"conformance: EXPECTED_DIFFERENCES entries that now pass on shmkafka: {stale}")
    for problem in problems:
        print(f"conformance: ERROR {problem}")
    if regressions:
        print(
            f"conformance: FAILED: {len(regressions)} test(s) pass with kafka-python "
            "but not with shmkafka"
        )
    return 1 if regressions or problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=("both", *VARIANTS), default="both")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument(
        "--sequential", action="store_true", help="run the two variants one after the other"
    )
    parser.add_argument(
        "--with-consumer-tests",
        action="store_true",
        help=f"also run {', '.join(CONSUMER_TEST_FILES)} (about 2 more minutes)",
    )
    parser.add_argument("--timeout", type=float, help="seconds per pytest run (150, or 400)")
    parser.add_argument(
        "--broker", choices=("tansu", "broker_stub"), default="tansu",
        help="the broker (broker_stub: a transaction coordinator that reports aborted "
        "transactions, which Tansu does not)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    test_files = TEST_FILES + (CONSUMER_TEST_FILES if args.with_consumer_tests else ())
    timeout = args.timeout or (400 if args.with_consumer_tests else 150)
    source = fetch_sdist()
    run = build_tree(source, test_files)
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    print(
        f"conformance: kafka-python {VERSION}'s {', '.join(test_files)} (unchanged) on "
        f"{args.broker}; "
        f"producers: {', '.join(variants)}"
    )

    def one(variant: str) -> dict:
        return run_variant(variant, run, source, test_files, args.keyword, timeout, args.broker)

    with ThreadPoolExecutor(max_workers=1 if args.sequential else len(variants)) as pool:
        runs = dict(zip(variants, pool.map(one, variants), strict=True))
    return compare(runs)


if __name__ == "__main__":
    sys.exit(main())
