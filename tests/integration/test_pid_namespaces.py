"""Containers that share /dev/shm but not their PID namespace (Kubernetes without
``shareProcessNamespace``, Docker without ``--pid=container:``), made with ``unshare``: a
producer that cannot see the pool's Sender is refused at once with the cause named, and no
cleanup removes the live pool (the Sender's kernel lock says it is alive)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from shmkafka.broker_stub.server import BrokerStub
from shmkafka.pool.cleanup import cleanup_pool, remove_orphans
from shmkafka.pool.shared_pool import SharedPool
from tests.conftest import SMALL, wait_removed

# Creates the pool (and its Sender, in the same PID namespace), sends, says so, waits for
# stdin to close, sends again, then closes and waits for the Sender to remove the pool: the
# namespace's processes are killed when its first process exits.
OWNER = """
import os, sys, time
from shmkafka import KafkaProducer
p = KafkaProducer(bootstrap_servers=sys.argv[1], pool=sys.argv[2], linger_ms=5)
for i in range(20):
    p.send("ns", b"%d" % i).get(30)
print("sent", flush=True)
sys.stdin.read()
for i in range(20):  # the refused producer took nothing of ours: the pool still serves us
    p.send("ns", b"%d" % i).get(30)
p.close()
deadline = time.monotonic() + 15
while os.path.exists("/dev/shm/shmkafka." + sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.05)
"""

# Another container's producer of the same pool.
OTHER = """
import sys, time
from shmkafka import KafkaProducer
from shmkafka.errors import PoolError
started = time.monotonic()
try:
    KafkaProducer(bootstrap_servers=sys.argv[1], pool=sys.argv[2], linger_ms=5)
except PoolError as exc:
    print(f"refused after {time.monotonic() - started:.1f} s: {exc}")
else:
    print("attached")
"""


def _unshare() -> list[str]:
    """The command that runs a program in a new PID namespace (with its own /proc)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) on this machine")
    base = ["unshare", "--pid", "--fork", "--mount-proc"]
    command = base if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", *base[1:]]
    probe = subprocess.run([*command, "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot make PID namespaces here: {probe.stderr.decode().strip()}")
    return command


@pytest.fixture
def stub() -> Iterator[BrokerStub]:
    with BrokerStub(nodes=1, partitions=1) as s:
        yield s


def test_a_producer_that_cannot_see_the_sender_is_refused(
    stub: BrokerStub, pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHMKAFKA_SENDER_IDLE_EXIT_MS", "300")
    unshare = _unshare()
    python = [sys.executable, "-c"]
    command = [*unshare, *python, OWNER, stub.bootstrap, pool_name]
    pipe = subprocess.PIPE
    with subprocess.Popen(command, stdin=pipe, stdout=pipe, text=True) as owner:
        try:
            assert owner.stdout is not None and owner.stdout.readline() == "sent\n"
            other = subprocess.run([*unshare, *python, OTHER, stub.bootstrap, pool_name],
                                   capture_output=True, text=True, timeout=60)  # fmt: skip
            assert other.returncode == 0, other.stderr
            assert other.stdout.startswith("refused after "), other.stdout
            assert float(other.stdout.split()[2]) < 5  # at once, not after a start timeout
            assert "cannot see: the pool is shared across PID namespaces" in other.stdout
            assert "shareProcessNamespace: true" in other.stdout
            # shmkafka doctor, run in such a container, names the pool and what to change
            doctor = subprocess.run(
                [*unshare, sys.executable, "-m", "shmkafka", "doctor", "--json",
                 "--pool", pool_name],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert doctor.returncode == 1, doctor.stderr
            found = {f["check"]: f for f in json.loads(doctor.stdout)["findings"]}
            seen = found[f"pool {pool_name} namespace"]
            assert seen["status"] == "fail" and "cannot see into" in seen["found"]
            assert "shareProcessNamespace: true" in seen["change"]
            sender = found[f"pool {pool_name} Sender"]  # (its health: not "no Sender")
            assert sender["status"] == "fail", sender
            assert (
                sender["found"] == "a Sender runs, in a PID namespace this process cannot see into"
            )
            # From here (the host's namespace) the recorded Sender pid is not that process
            # either; its lock keeps the pool from every cleanup.
            kept = cleanup_pool(pool_name)
            assert not kept.removed and kept.reason.startswith("in use by pid")
            assert pool_name not in remove_orphans()
            assert os.path.exists(f"/dev/shm/shmkafka.{pool_name}")
        finally:
            assert owner.stdin is not None
            owner.stdin.close()
            assert owner.wait(30) == 0
    wait_removed(pool_name)


SWEEP = """
import json, sys
from shmkafka.pool.cleanup import cleanup_pool, remove_orphans
print(json.dumps([remove_orphans(), cleanup_pool(sys.argv[1]).removed]))
"""


def test_a_sweep_in_another_pid_namespace_never_removes_a_live_pool(pool_name: str) -> None:
    # A pool of this namespace's processes, with no Sender and no record, as it is between
    # a producer's attach and its Sender's start: another container's Sender, starting,
    # sweeps the orphans of /dev/shm. The pids of our slots mean nothing there (was: they
    # looked dead, and it removed our pool).
    pool = SharedPool.open(pool_name, SMALL)
    try:
        sweep = subprocess.run([*_unshare(), sys.executable, "-c", SWEEP, pool_name],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert sweep.returncode == 0, sweep.stderr
        removed, cleaned = json.loads(sweep.stdout)
        assert pool_name not in removed and cleaned is False
        assert pool.segment.is_current()  # (the name is still our pool's)
    finally:
        pool.destroy()
