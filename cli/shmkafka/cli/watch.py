"""``shmkafka stat --watch``: a pool's live rates, refreshed in place like ``top``.

Every ``--interval`` seconds each pool is sampled (pool/metrics.py: nothing locked, nothing
written) and shown with its rates over the last interval: records/s, bytes/s, requests/s,
errors, queue depth, buffer use, and the Sender's CPU. On a terminal the screen is redrawn
in place; otherwise (a pipe, a log) each refresh is printed after the last, and ``--json``
prints one JSON object per pool per refresh (JSON lines).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from shmkafka.pool.metrics import PoolWatcher
from shmkafka.shm.errors import ShmError

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


def watch(pool: str | None, interval_s: float, count: int | None, as_json: bool,
          out: TextIO = sys.stdout) -> int:  # fmt: skip
    """Refresh until interrupted, or ``count`` times; exit status 1 if ``pool`` is missing."""
    # Rates over the last interval only: the window holds the previous sample and this one.
    watcher = PoolWatcher(pool, window_s=interval_s * 0.999)
    redraw = out.isatty() and not as_json
    shown = 0
    try:
        watcher.sample()  # rates start with the next sample
        while count is None or shown < count:
            time.sleep(interval_s)
            pools = watcher.sample()
            shown += 1
            if as_json:
                for name, values in pools.items():
                    out.write(json.dumps({"pool": name, "time": time.time(), **values}) + "\n")
            else:
                cpu = {name: watcher.window(name).sender_cpu_share() for name in pools}
                frame = format_frame(pools, cpu, interval_s)
                out.write((CLEAR if redraw else "") + frame + ("\n" if redraw else "\n\n"))
            out.flush()
    except KeyboardInterrupt:
        pass
    except (ShmError, OSError) as exc:
        print(f"shmkafka stat: {exc}", file=sys.stderr)
        return 1
    finally:
        watcher.close()
    return 0


def format_frame(pools: dict[str, dict[str, float]], cpu: dict[str, float | None],
                 interval_s: float) -> str:  # fmt: skip
    """``cpu``: each pool's Sender CPU share over the interval (None: not known)."""
    header = time.strftime("%H:%M:%S") + f"  every {interval_s:g} s"
    if not pools:
        return header + "\nno shmkafka pools found"
    return "\n".join([header] + [_pool_lines(n, v, cpu.get(n))
                                 for n, v in sorted(pools.items())])  # fmt: skip


def _pool_lines(name: str, m: dict[str, Any], cpu: float | None) -> str:
    cpu_pct = "-- CPU" if cpu is None else f"{cpu * 100:.0f}% CPU"
    total, free = m["buffer-total-bytes"], m["buffer-available-bytes"]
    used_pct = (total - free) / total * 100 if total else 0.0
    return "\n".join([
        f"pool {name}: Sender {'up' if m['sender-up'] else 'NOT RUNNING'} ({cpu_pct}), "
        f"{m['producer-processes']:.0f} producer processes, "
        f"{m['connection-count']:.0f} broker connections",
        f"  records/s {m['record-send-rate']:>12,.0f}   bytes/s {_bytes(m['outgoing-byte-rate'])}"
        f"   requests/s {m['request-rate']:>8,.0f}   latency avg "
        f"{m['request-latency-avg']:.1f} ms",
        f"  errors/s {m['record-error-rate']:>13,.0f}   errors {m['record-error-total']:,.0f}"
        f"   retries {m['record-retry-total']:,.0f}   expired batches "
        f"{m['batch-expired-total']:,.0f}",
        f"  queue {m['records-queued']:,.0f} records in {m['batches-queued']:,.0f} batches, "
        f"{m['batches-in-flight']:,.0f} in flight   buffer {_bytes(total - free)} of "
        f"{_bytes(total)} ({used_pct:.0f}%), {m['waiting-threads']:.0f} waiting",
        f"  sent {m['record-send-total']:,.0f} records in {m['request-total']:,.0f} requests",
    ])  # fmt: skip


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n:.1f} GiB"
