"""App-process bodies for the Sender's end-to-end tests (importable by spawn)."""

from __future__ import annotations

from typing import Any

from shmkafka.producer.client import Client


def record(proc: int, seq: int) -> tuple[bytes | None, bytes, list[tuple[str, bytes | None]]]:
    key = None if seq % 10 == 0 else b"key-%d-%d" % (proc, seq % 50)
    value = b"%d:%d:" % (proc, seq) + bytes(60)
    return key, value, [("proc", b"%d" % proc)]


def _outcome(futures: list[Any]) -> tuple[list[tuple[int, int, int]], list[str]]:
    """(seq, partition, offset) of every succeeded future, and the first failures."""
    results, errors = [], []
    for seq, future in enumerate(futures):
        if future.succeeded():
            assert future.value is not None
            results.append((seq, future.value.partition, future.value.offset))
        else:
            errors.append(f"{seq}: {future.exception!r}")
    return results, errors[:5]


def produce(
    pool: str,
    config: dict[str, Any],
    topic: str,
    proc: int,
    count: int,
    out: Any,
    seconds: float = 0.0,
    pad: int = 0,
    kills: tuple[Any, int, Any] | None = None,
) -> None:
    """Send ``count`` records (spread over about ``seconds``, so that Sender kills land
    mid-run; each value ``pad`` bytes longer) and report how every future ended.
    ``kills`` (killed, total, done): the records are spread over the kills instead, however
    long a Sender takes to come back: chunk c of 50 waits until the shared ``killed`` count
    reached c * total / 50; the producer stays attached (its Senders restarted) until
    ``done`` is set. Every wait is bounded."""
    import time

    handle = Client(pool, config, sender_idle_exit_ms=500)
    try:
        futures = []
        chunk = max(1, count // 50)
        for seq in range(count):
            if kills is not None and seq % chunk == 0:
                _wait_for_count(kills[0], seq // chunk * kills[1] // 50, 60)
            key, value, headers = record(proc, seq)
            futures.append(handle.send(topic, value + bytes(pad), key, headers))
            if seconds and seq % chunk == chunk - 1:
                time.sleep(seconds / 50)
        handle.flush(180)
        results, errors = _outcome(futures)
        sender = handle.pool.sender()[0]
        out.put({"proc": proc, "results": results, "errors": errors, "sender": sender})
        if kills is not None:
            kills[2].wait(180)
    finally:
        handle.close(30)


def _wait_for_count(counter: Any, target: int, seconds: float) -> None:
    import time

    deadline = time.monotonic() + seconds
    while counter.value < target and time.monotonic() < deadline:
        time.sleep(0.02)


def send_then_die(pool: str, config: dict[str, Any], topic: str, count: int, out: Any) -> None:
    """Send records 0..count-1, report, and die by SIGKILL right after the last send()."""
    import os
    import signal

    handle = Client(pool, config, sender_idle_exit_ms=500)
    for seq in range(count):
        key, value, headers = record(9, seq)
        handle.send(topic, value, key, headers)
    out.put(handle.pool.sender()[0])
    out.close()
    out.join_thread()  # the report is written before we die
    os.kill(os.getpid(), signal.SIGKILL)


def attach_once(pool: str, config: dict[str, Any], barrier: Any, out: Any) -> None:
    """Attach at the same moment as the others, then report which Sender serves the pool."""
    barrier.wait()
    handle = Client(pool, config, sender_idle_exit_ms=500)
    try:
        out.put(handle.pool.sender()[0])
    finally:
        handle.close(10)


def produce_through_restart(
    pool: str, config: dict[str, Any], topic: str, count: int, seconds: float, out: Any
) -> None:
    """Send ``count`` records over ``seconds``; report how every future ended."""
    import time

    from shmkafka.errors import KafkaTimeoutError

    handle = Client(pool, config, sender_idle_exit_ms=500)
    try:
        futures = []
        for seq in range(count):
            key, value, headers = record(5, seq)
            futures.append(handle.send(topic, value, key, headers))
            time.sleep(seconds / count)
        started = time.monotonic()
        handle.flush(config["delivery_timeout_ms"] / 1000 + 30)
        waited = time.monotonic() - started
        ok = [seq for seq, f in enumerate(futures) if f.succeeded()]
        timeouts = sum(1 for f in futures if isinstance(f.exception, KafkaTimeoutError))
        other = [
            repr(f.exception)
            for f in futures
            if f.failed() and not isinstance(f.exception, KafkaTimeoutError)
        ]
        pending = sum(1 for f in futures if not f.is_done)
        out.put(
            {
                "ok": ok,
                "timeouts": timeouts,
                "other": other[:5],
                "pending": pending,
                "flush_s": waited,
            }
        )
    finally:
        handle.close(30)


def send_until_killed(pool: str, config: dict[str, Any], topic: str, proc: int, last: Any) -> None:
    """Send records proc:0, proc:1, ... until SIGKILLed; ``last`` holds the highest seq whose
    send() has returned (written after it returns)."""
    handle = Client(pool, config, sender_idle_exit_ms=500)
    seq = 0
    while True:
        key, value, headers = record(proc, seq)
        handle.send(topic, value, key, headers)
        last.value = seq
        seq += 1


def send_and_wait(pool: str, config: dict[str, Any], topic: str, proc: int, count: int,
                  ready: Any, out: Any) -> None:  # fmt: skip
    """Send ``count`` records, signal ``ready``, then wait for every future (the test may
    SIGSTOP this process meanwhile) and report how many succeeded."""
    handle = Client(pool, config, sender_idle_exit_ms=500)
    futures = []
    for seq in range(count):
        key, value, headers = record(proc, seq)
        futures.append(handle.send(topic, value, key, headers))
    ready.set()
    for f in futures:
        f.get(60)
    out.put(sum(1 for f in futures if f.succeeded()))
    handle.close(10)
