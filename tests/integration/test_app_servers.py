"""Real application servers serving real HTTP requests that produce (tests/integration/apps/
web.py: the producer made at import, as a user's app does): gunicorn with and without
``--preload``, uvicorn ``--workers``, uWSGI preforking, with ``--lazy-apps`` and with
``--enable-threads``; and an asyncio app (apps/aioweb.py: Starlette with
``shmkafka.aiokafka.AIOKafkaProducer``, awaiting each record's acknowledgement) under uvicorn
``--workers`` and gunicorn with uvicorn workers. Every acknowledged record is read back
exactly once and in order per worker; one Sender serves the host; a worker SIGKILLed
mid-traffic loses nothing it acknowledged. On Tansu."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import pytest

from shmkafka.perf.brokers import free_port
from tests.integration.kafka_io import cluster, consume_all, unique_topic
from tests.peers import Peer

pytestmark = pytest.mark.usefixtures("pool_removed")
BIN = os.path.dirname(sys.executable)
APP = "tests.integration.apps.web"
PARTITIONS = 4
WORKERS = 3


AIO_APP = "tests.integration.apps.aioweb"  # Starlette, shmkafka.aiokafka


def _command(server: str, port: int) -> list[str]:
    address = f"127.0.0.1:{port}"
    uvicorn = [f"{BIN}/uvicorn", "--workers", str(WORKERS), "--host", "127.0.0.1", "--port",
               str(port), "--no-access-log"]  # fmt: skip
    gunicorn = [f"{BIN}/gunicorn", "--workers", str(WORKERS), "--bind", address, f"{APP}:app"]
    uwsgi = [f"{BIN}/uwsgi", "--master", "--processes", str(WORKERS), "--http-socket", address,
             "--module", f"{APP}:app", "--die-on-term", "--disable-logging"]  # fmt: skip
    return {
        "gunicorn": gunicorn,
        "gunicorn --preload": [*gunicorn, "--preload"],
        "uvicorn --workers": [
            f"{BIN}/uvicorn",
            "--workers",
            str(WORKERS),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            f"{APP}:asgi",
        ],
        "uvicorn --workers (asyncio)": [*uvicorn, f"{AIO_APP}:app"],
        "gunicorn -k uvicorn (asyncio)": [
            f"{BIN}/gunicorn",
            "--workers",
            str(WORKERS),
            "--bind",
            address,
            "--worker-class",
            "uvicorn.workers.UvicornWorker",
            f"{AIO_APP}:app",
        ],
        "uwsgi": uwsgi,
        "uwsgi --lazy-apps": [*uwsgi, "--lazy-apps"],
        "uwsgi --enable-threads": [*uwsgi, "--enable-threads"],
    }[server]


def _request(port: int, request_id: str, count: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/produce?id={request_id}&n={count}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


@contextmanager
def _serving(server: str, tansu: Peer, topic: str, pool: str) -> Iterator[tuple[int, Any]]:
    port = free_port()
    env = dict(os.environ, SHMKAFKA_TEST_BOOTSTRAP=tansu.bootstrap, SHMKAFKA_TEST_TOPIC=topic,
               SHMKAFKA_TEST_POOL=pool, PYTHONPATH=os.getcwd())  # fmt: skip
    proc = subprocess.Popen(_command(server, port), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _request(port, "probe", 1)
                break
            except OSError:
                assert proc.poll() is None, f"{server} exited with {proc.returncode}"
                assert time.monotonic() < deadline, f"{server} did not answer in 60 s"
                time.sleep(0.2)
        yield port, proc
    finally:
        with_children = psutil.Process(proc.pid).children(recursive=True)
        # (uWSGI's master waits out its workers' reload mercy, 60 s, on SIGTERM; SIGINT is
        # its "stop now")
        os.killpg(proc.pid, signal.SIGINT if server.startswith("uwsgi") else signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        psutil.wait_procs([p for p in with_children if p.is_running()], timeout=10)


def _senders(pool: str) -> int:
    count = 0
    for p in psutil.process_iter(["cmdline"]):
        line = p.info["cmdline"] or []
        if "shmkafka.sender" in line and pool in line:
            count += 1
    return count


def _traffic(port: int, requests: int, count: int, prefix: str) -> tuple[list[str], set[int], int]:
    """``requests`` requests from 6 threads; (acknowledged values, worker pids, failures)."""
    acked: list[str] = []
    pids: set[int] = set()
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        calls = [pool.submit(_request, port, f"{prefix}{i}", count) for i in range(requests)]
        for call in calls:
            try:
                answer = call.result()
            except OSError:
                failed += 1
                continue
            acked += answer["acked"]
            pids.add(answer["pid"])
    return acked, pids, failed


def _check_read_back(tansu: Peer, topic: str, acked: list[str], sent_at_most: int) -> None:
    """Every acknowledged record exactly once; a request's records in order."""
    messages = consume_all(tansu, topic, list(range(PARTITIONS)), len(acked))
    values = [m.value().decode() for m in messages]
    assert len(values) == len(set(values)), "a record was read back twice"
    assert set(acked) <= set(values), "an acknowledged record is missing"
    assert len(values) <= sent_at_most
    seen: dict[str, list[tuple[int, int, int]]] = {}
    for m in messages:
        request_id, index = m.value().decode().rsplit(":", 1)
        seen.setdefault(request_id, []).append((m.partition(), m.offset(), int(index)))
    for records in seen.values():
        assert len({p for p, _, _ in records}) == 1  # one worker, one key, one partition
        assert [i for _, _, i in sorted(records)] == sorted(i for _, _, i in records)


@pytest.mark.parametrize(
    "server",
    ["gunicorn", "gunicorn --preload", "uvicorn --workers", "uwsgi", "uwsgi --lazy-apps",
     "uwsgi --enable-threads", "uvicorn --workers (asyncio)", "gunicorn -k uvicorn (asyncio)"],
)  # fmt: skip
def test_an_app_server_delivers_every_acknowledged_record_once(
    server: str, tansu: Peer, pool_name: str
) -> None:
    topic = unique_topic("web")
    with cluster(tansu) as c:
        c.ensure_topic(topic, PARTITIONS)
    with _serving(server, tansu, topic, pool_name) as (port, _):
        started = time.monotonic()
        acked, pids, failed = _traffic(port, 60, 10, "r")
        seconds = time.monotonic() - started
        # (a loaded machine may start one worker seconds before the other, which then
        # accepts every request: rounds go on, up to 30 s, until two workers served one)
        rounds, deadline = 1, time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:
            more, more_pids, more_failed = _traffic(port, 60, 10, f"r{rounds}-")
            acked, pids, failed = acked + more, pids | more_pids, failed + more_failed
            rounds += 1
        assert failed == 0 and len(acked) == 600 * rounds
        assert len(pids) >= 2, f"one worker served every request: {pids}"
        assert _senders(pool_name) == 1  # one Sender for the host
    print(f"{server}: 60 requests in {seconds:.2f} s ({60 / seconds:.0f} requests/s), "
          f"600 records acknowledged, {len(pids)} workers, 1 Sender")  # fmt: skip
    _check_read_back(tansu, topic, ["probe:0", *acked], 600 * rounds + 1)


@pytest.mark.parametrize(
    "server", ["gunicorn", "uwsgi", "uvicorn --workers (asyncio)", "gunicorn -k uvicorn (asyncio)"]
)
def test_a_worker_killed_mid_traffic_loses_nothing_it_acknowledged(
    server: str, tansu: Peer, pool_name: str
) -> None:
    topic = unique_topic("web")
    with cluster(tansu) as c:
        c.ensure_topic(topic, PARTITIONS)
    with _serving(server, tansu, topic, pool_name) as (port, proc):
        with concurrent.futures.ThreadPoolExecutor(1) as side:
            traffic = side.submit(_traffic, port, 80, 50, "k")
            time.sleep(0.5)
            workers = psutil.Process(proc.pid).children()
            victim = next(w for w in workers if "shmkafka.sender" not in w.cmdline())
            victim.send_signal(signal.SIGKILL)
            acked, _, failed = traffic.result()
        after, _, after_failed = _traffic(port, 6, 10, "after")  # the server goes on
        assert after_failed == 0 and len(after) == 60
    assert len(acked) + 50 * failed == 80 * 50  # a request either answered or failed whole
    _check_read_back(tansu, topic, ["probe:0", *acked, *after], 1 + 80 * 50 + 60)
