"""The floor of a paced process's wakes: what one wake costs a thread that does nothing with
it, on this machine, beside the ticks of a pacing loop.

    .venv/bin/python perf/bench_wake.py [--wakes 2000] [--rate 200] [--seconds-per-tick 0.002]

A child process posts a POSIX semaphore ``--rate`` times a second, as the Sender wakes an
app's completion thread; a thread of this process waits on it with the library's own wait
(``shm.waits.acquire``, as ``CompletionRings.wait``), and does nothing else. Meanwhile the
main thread sleeps in ticks of ``--seconds-per-tick``, as the perf tool's pacing loop does
between records. Prints the waiting thread's CPU per wake, the main thread's CPU per tick,
and the poster's CPU per post (with its own sleep), each from ``time.thread_time``.

A completion thread's wake costs this floor plus its round (``bench_completion_round.py``);
what a paced app's two threads cost beyond their wakes is the Python they run.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import posix_ipc

from shmkafka.shm import waits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wakes", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0, help="wakes a second")
    parser.add_argument("--seconds-per-tick", type=float, default=0.002)
    args = parser.parse_args()
    name = f"/shmkafka-bench-wake-{os.getpid()}"
    sem = posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=0o600)
    try:
        per_wake: list[float] = []
        waiter = threading.Thread(target=_wait, args=(sem, args.wakes, per_wake))
        waiter.start()
        poster = os.fork()
        if poster == 0:  # (the child: posts, then exits without the parent's cleanup)
            try:
                _post(name, args.wakes, args.rate)
            finally:
                os._exit(0)
        per_tick = _tick(waiter, args.seconds_per_tick)
        waiter.join(args.wakes / args.rate + 30)
        os.waitpid(poster, 0)
        print(f"waiting thread: {per_wake[0] * 1e6:.1f} µs of CPU a wake ({args.wakes} wakes)")
        print(f"pacing loop: {per_tick * 1e6:.1f} µs of CPU a {args.seconds_per_tick * 1e3:g} ms "
              f"sleep")  # fmt: skip
    finally:
        sem.unlink()
        sem.close()


def _wait(sem: posix_ipc.Semaphore, wakes: int, out: list[float]) -> None:
    start = time.thread_time()
    for _ in range(wakes):
        waits.acquire(sem, 1.0)
    out.append((time.thread_time() - start) / wakes)


def _post(name: str, wakes: int, rate: float) -> None:
    sem = posix_ipc.Semaphore(name)
    cpu, begun = time.thread_time(), time.monotonic()
    for i in range(wakes):
        delay = begun + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sem.release()
    print(f"poster: {(time.thread_time() - cpu) / wakes * 1e6:.1f} µs of CPU a post "
          f"(with its sleep)", flush=True)  # fmt: skip


def _tick(waiter: threading.Thread, seconds: float) -> float:
    cpu, ticks = time.thread_time(), 0
    while waiter.is_alive():
        time.sleep(seconds)
        ticks += 1
    return (time.thread_time() - cpu) / max(1, ticks)


if __name__ == "__main__":
    main()
