"""``shmkafka doctor`` (cli/doctor.py): every check passes on a host that has what a pool
needs, and each check's failure is made for real and named with what to change: a 16 MiB
/dev/shm and a read-only one (each in a mount namespace of its own, so the host's pools are
untouched), another user's pool and a pool others can read, a low file limit, the C parts
switched off, an unreachable broker, a broker that refuses the SASL login, and a pool
without a Sender. (A pool whose Sender is in another PID namespace: test_pid_namespaces.py.)
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shmkafka.cli import main
from shmkafka.cli.doctor import _extension_modules
from shmkafka.pool.config import PoolConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.layout import H_INTERNAL_ERRORS, Layout
from tests.conftest import SMALL
from tests.security import USERS, Setup, make_certs

DOCTOR = [sys.executable, "-m", "shmkafka", "doctor", "--json"]


def _findings(out: str) -> dict[str, dict[str, str]]:
    return {f["check"]: f for f in json.loads(out)["findings"]}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, dict[str, str]]]:
    status = main(["doctor", "--json", *args])
    return status, _findings(capsys.readouterr().out)


def _in_own_shm(
    setup: str, *args: str, mount: str = "size=64m", text: bool = False
) -> subprocess.CompletedProcess[str]:
    """``shmkafka doctor`` (``--json``, or its ``text`` form) in a mount namespace whose
    /dev/shm is a new tmpfs (``mount``'s options), after the shell lines ``setup`` ran
    there."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail(
            "these checks' failures are made in mount namespaces: run as root with unshare(1)"
        )
    script = f'mount -t tmpfs -o {mount} tmpfs /dev/shm && {setup or "true"} && exec "$@"'
    unshare = ["unshare", "--mount", "--propagation", "private"]
    doctor = DOCTOR[:-1] if text else DOCTOR
    return subprocess.run([*unshare, "sh", "-c", script, "sh", *doctor, *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_a_host_with_what_a_pool_needs_passes() -> None:
    # (its own /dev/shm: other tests' pools, some in PID namespaces of their own, stay out)
    out = _in_own_shm("", mount="size=256m")
    assert out.returncode == 0, out.stdout + out.stderr
    found = _findings(out.stdout)
    for check in ("/dev/shm space", "/dev/shm writable", "semaphores", "open files",
                  "namespaces", "C extensions", "peers"):  # fmt: skip
        assert found[check]["status"] == "ok", found[check]
    assert "confluent-kafka 2." in found["peers"]["found"]


def test_a_16_mib_dev_shm_fails_with_the_size_to_give_it() -> None:
    out = _in_own_shm("", mount="size=16m")
    assert out.returncode == 1, out.stderr
    space = _findings(out.stdout)["/dev/shm space"]
    assert space["status"] == "fail"
    assert space["found"].startswith("16 MiB, 16 MiB free; a pool with these settings takes 34 MiB")
    assert "make /dev/shm at least 34 MiB" in space["change"] and "--shm-size" in space["change"]
    # with a buffer small enough, the same /dev/shm is enough; the address space the pool
    # may grow into with use is named (rounded up), not required
    small = _in_own_shm("", "--producer-property", "buffer_memory=4194304", mount="size=16m")
    assert small.returncode == 0, small.stdout + small.stderr
    space = _findings(small.stdout)["/dev/shm space"]
    whole = -(-Layout.for_config(PoolConfig(buffer_memory=4 << 20)).size // (1 << 20))
    assert space["status"] == "ok" and f"grows with use up to {whole} MiB at its" in space["found"]


def test_a_read_only_dev_shm_fails_the_file_and_semaphore_checks() -> None:
    out = _in_own_shm("", mount="size=64m,ro")
    assert out.returncode == 1, out.stderr
    found = _findings(out.stdout)
    assert found["/dev/shm writable"]["status"] == "fail"
    assert "Read-only file system" in found["/dev/shm writable"]["found"]
    assert found["semaphores"]["status"] == "fail"
    assert not [f for f in found.values() if f["check"].startswith("pool ")]


def test_another_users_pool_is_named_and_a_readable_one_fails() -> None:
    setup = (
        "touch /dev/shm/shmkafka.theirs && chown 65534:65534 /dev/shm/shmkafka.theirs && "
        "chmod 600 /dev/shm/shmkafka.theirs && "
        "touch /dev/shm/shmkafka.mine && chmod 644 /dev/shm/shmkafka.mine && "
        "touch /dev/shm/shmkafka.kept && chmod 600 /dev/shm/shmkafka.kept"
    )
    out = _in_own_shm(setup)
    assert out.returncode == 1, out.stderr
    found = _findings(out.stdout)
    theirs = found["pool theirs"]
    assert theirs["status"] == "warn" and "belongs to uid 65534" in theirs["found"]
    assert "as uid 65534, or give this user's producers another pool name" in theirs["change"]
    mine = found["pool mine"]
    assert mine["status"] == "fail" and mine["found"].startswith("mode 644: other users can read")
    assert mine["change"] == "chmod 600 /dev/shm/shmkafka.mine"
    assert found["pool kept"]["status"] == "ok"


def test_a_low_file_limit_warns() -> None:
    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    out = subprocess.run(DOCTOR, capture_output=True, text=True, timeout=60, preexec_fn=low)
    # (a warning: it works, until it does not; other tests' pools in the host's /dev/shm may
    # fail other checks meanwhile, so only this check's finding is asserted)
    files = _findings(out.stdout)["open files"]
    assert files["status"] == "warn" and files["found"] == "RLIMIT_NOFILE soft 256, hard 256"
    assert "raise it to 1024" in files["change"]


def test_the_pure_python_switch_warns() -> None:
    env = {**os.environ, "SHMKAFKA_PURE_PYTHON": "1"}
    out = subprocess.run(DOCTOR, capture_output=True, text=True, timeout=60, env=env)
    c = _findings(out.stdout)["C extensions"]
    assert c["status"] == "warn" and "SHMKAFKA_PURE_PYTHON is set" in c["found"]


def test_an_unreachable_broker_fails(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # (closed again: nobody listens there)
    status, found = _run(capsys, "--bootstrap-server", f"127.0.0.1:{port}", "--timeout-ms", "1500")
    assert status == 1
    brokers = found["brokers"]
    assert brokers["status"] == "fail"
    assert brokers["found"].startswith(f"127.0.0.1:{port} (PLAINTEXT): NoBrokersAvailable: no ")
    assert "listener" in brokers["change"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_refused_sasl_login_fails_and_never_shows_the_password(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mechanism: str
) -> None:
    setup = Setup(mechanism=mechanism)
    with setup.stub(make_certs(tmp_path), nodes=2) as stub:

        def doctor(password: str, timeout_ms: int) -> tuple[int, dict[str, Any], str]:
            config = tmp_path / "client.properties"  # (a secret never goes on a command line)
            config.write_text(
                f"security_protocol=SASL_PLAINTEXT\nsasl_mechanism={mechanism}\n"
                f"sasl_plain_username=alice\nsasl_plain_password={password}\n"
            )
            config.chmod(0o600)
            given = ["--producer.config", str(config), "--timeout-ms", str(timeout_ms)]
            status = main(["doctor", "--json", "--bootstrap-server", stub.bootstrap, *given])
            out = capsys.readouterr().out
            return status, _findings(out)["brokers"], out

        status, brokers, out = doctor("not-" + USERS["alice"], 1000)
        assert status == 1 and brokers["status"] == "fail", brokers
        assert "SASL_PLAINTEXT" in brokers["found"] and "uthentication" in brokers["found"]
        assert "not-" + USERS["alice"] not in out
        status, brokers, out = doctor(USERS["alice"], 10_000)
        assert brokers["status"] == "ok", brokers
        assert "2 brokers" in brokers["found"] and USERS["alice"] not in out


def test_a_pool_without_a_sender_and_a_missing_pool_fail(
    capsys: pytest.CaptureFixture[str], pool_name: str
) -> None:
    status, found = _run(capsys, "--pool", pool_name)
    assert status == 1
    missing = found[f"pool {pool_name} health"]
    assert missing["status"] == "fail" and f"no pool named {pool_name!r}" in missing["found"]
    pool = SharedPool.open(pool_name, SMALL)
    try:
        status, found = _run(capsys, "--pool", pool_name)
        assert status == 1
        sender = found[f"pool {pool_name} Sender"]
        assert sender["status"] == "fail" and sender["found"] == "no Sender is running"
        assert f"shmkafka sender --pool {pool_name}" in sender["change"]
        assert found[f"pool {pool_name} errors"]["status"] == "ok"
        assert found[f"pool {pool_name}"]["status"] == "ok"  # (this user's, mode 600)
    finally:
        pool.destroy()


def test_the_text_form_says_what_to_change() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # (its own /dev/shm: a pool another test or process left on the host fails a check too)
    out = _in_own_shm("", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout-ms", "500",
                      mount="size=256m", text=True)  # fmt: skip
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    failed = [i for i, line in enumerate(lines) if line.startswith("FAIL  brokers")]
    assert failed and lines[failed[0] + 1].lstrip().startswith("-> check the address")
    assert lines[-1].startswith("1 failed, "), out.stdout


def test_tls_is_checked_against_the_ca_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    certs = make_certs(tmp_path)
    with Setup(tls=True).stub(certs, nodes=1) as stub:
        for ca, timeout_ms, expected in ((certs.other_ca, 1000, "fail"), (certs.ca, 10_000, "ok")):
            status, found = _run(
                capsys, "--bootstrap-server", stub.bootstrap, "--timeout-ms", str(timeout_ms),
                "--producer-property", "security_protocol=SSL",
                "--producer-property", f"ssl_cafile={ca}",
            )  # fmt: skip
            brokers = found["brokers"]
            assert brokers["status"] == expected, brokers
            assert status == 1 or expected == "ok"
            assert "(SSL)" in brokers["found"]
            if expected == "fail":
                assert "SSL handshake failed: unable to get local issuer" in brokers["found"]


def test_a_password_that_reads_as_a_number_stays_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with Setup(mechanism="PLAIN").stub(make_certs(tmp_path), nodes=1) as stub:
        config = tmp_path / "client.properties"
        config.write_text(
            "security_protocol=SASL_PLAINTEXT\nsasl_mechanism=PLAIN\n"
            "sasl_plain_username=alice\nsasl_plain_password=98765432\n"
        )
        config.chmod(0o600)
        status, found = _run(capsys, "--bootstrap-server", stub.bootstrap, "--timeout-ms",
                             "1000", "--producer.config", str(config))  # fmt: skip
    brokers = found["brokers"]  # (the broker refuses it: it is not alice's password)
    assert status == 1 and brokers["status"] == "fail" and "uthentication" in brokers["found"]


def test_a_pool_full_of_live_processes_fails_and_dead_ones_and_internal_errors_are_named(
    capsys: pytest.CaptureFixture[str], pool_name: str
) -> None:
    pool = SharedPool.open(pool_name, dataclasses.replace(SMALL, max_processes=2))
    attach = (
        "import sys; from shmkafka.pool.shared_pool import SharedPool; "
        f"p = SharedPool.open({pool_name!r}); print('attached', flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen([sys.executable, "-c", attach], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        with child:
            assert child.stdout is not None and child.stdout.readline() == "attached\n"
            _, found = _run(capsys, "--pool", pool_name)
            slots = found[f"pool {pool_name} processes"]
            assert slots["status"] == "fail", slots
            assert slots["found"] == "2 of 2 slots taken, 0 by dead processes"
            assert slots["change"].startswith("no process can attach: make the pool with a larger")
            child.kill()
            child.wait(timeout=10)
            _, found = _run(capsys, "--pool", pool_name)
            slots = found[f"pool {pool_name} processes"]
            assert slots["status"] == "warn", slots
            assert slots["found"] == f"2 of 2 slots taken, 1 by dead processes (pids [{child.pid}])"
            assert slots["change"] == "the next process to attach reclaims their slots"
            assert found[f"pool {pool_name} errors"]["status"] == "ok"
            pool.count_internal_errors(3)  # (as liveness.py counts a record no result can reach)
            status, found = _run(capsys, "--pool", pool_name)
            errors = found[f"pool {pool_name} errors"]
            assert status == 1 and errors["status"] == "fail"
            assert errors["found"] == "3 internal errors recorded"
            assert pool.segment.words[H_INTERNAL_ERRORS >> 3] == 3
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        pool.destroy()


def test_c_extensions_that_do_not_load_warn_with_what_to_install() -> None:
    # (the one extension's import fails as it does where no wheel fits the platform)
    block = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name == {_extension_modules()[0]!r}: raise ImportError('no such .so')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from shmkafka.cli import main\n"
        "sys.exit(main(['doctor', '--json']))\n"
    )
    out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=60)
    c = _findings(out.stdout)["C extensions"]
    assert c["status"] == "warn", c
    assert c["found"].startswith("not loaded, sends run in Python (slower): ")
    assert f"{_extension_modules()[0]} (no such .so)" in c["found"]
    assert "install a wheel for this platform" in c["change"]


def test_a_pool_link_to_a_file_that_is_gone_warns() -> None:
    # (a durable pool is a link from /dev/shm to its file on disk)
    out = _in_own_shm("ln -s /nonexistent/pool /dev/shm/shmkafka.ghost")
    ghost = _findings(out.stdout)["pool ghost"]
    assert ghost["status"] == "warn", ghost
    assert ghost["found"] == "links to /nonexistent/pool, which is gone"
    assert ghost["change"] == "shmkafka cleanup --pool ghost"


def test_an_oauthbearer_broker_is_named_as_not_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # (confluent-kafka's OIDC settings: the Sender would fetch the token from the endpoint)
    secret = tmp_path / "client.properties"
    secret.write_text("sasl.oauthbearer.client.secret=s3cr3t\n")
    secret.chmod(0o600)
    _, found = _run(
        capsys, "--api", "confluent", "--bootstrap-server", "127.0.0.1:9",
        "--producer-property", "security.protocol=SASL_PLAINTEXT",
        "--producer-property", "sasl.mechanism=OAUTHBEARER",
        "--producer-property", "sasl.oauthbearer.method=oidc",
        "--producer-property", "sasl.oauthbearer.client.id=app",
        "--producer-property", "sasl.oauthbearer.token.endpoint.url=http://127.0.0.1:9/token",
        "--producer.config", str(secret),
    )  # fmt: skip
    brokers = found["brokers"]
    assert brokers["status"] == "warn", brokers
    assert brokers["found"].startswith("127.0.0.1:9 (SASL_PLAINTEXT, OAUTHBEARER) not checked")
    assert brokers["change"] == "check it with a producer"
    assert "s3cr3t" not in json.dumps(found)
