"""The soak's figures, from the run directory: latency outside and during faults, the
longest stretch without an acknowledgement after each fault and when acks resumed, memory
per minute; and the printed report."""

from __future__ import annotations

import bisect
import os
import statistics
from collections import Counter
from typing import Any

from tests.soak.history import ACKED, read_history
from tests.soak.nemesis import GLOBAL, KINDS

DEFECTS = ("lost", "duplicated", "reordered", "phantom", "hung")


def memory_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """First and last sample and the peak, per process kind (Senders, workers, broker)."""
    out: dict[str, Any] = {}
    for kind in ("sender", "w", "broker"):
        series = [sum(v["pss_mb"] for k, v in row.items() if k.startswith(kind) and
                      isinstance(v, dict)) for row in rows]  # fmt: skip
        rss = [sum(v["rss_mb"] for k, v in row.items() if k.startswith(kind) and
                   isinstance(v, dict)) for row in rows]  # fmt: skip
        if series:
            name = {"sender": "senders", "w": "workers", "broker": "broker"}[kind]
            series, rss = [round(x, 1) for x in series], [round(x, 1) for x in rss]
            out[name] = {"pss_mb_first": series[0], "pss_mb_last": series[-1],
                         "pss_mb_max": max(series), "rss_mb_first": rss[0],
                         "rss_mb_last": rss[-1], "rss_mb_max": max(rss)}  # fmt: skip
    out["per_minute"] = rows
    return out


def timeline(directory: str, faults: list[dict[str, Any]], pool_of: dict[int, str],
             started: int, ended: int) -> dict[str, Any]:  # fmt: skip
    """p99 send→ack outside and during faults (in the record's scope); per fault kind, the
    longest stretch without an acknowledgement in its scope (its pool, or every pool) and
    the time acks resumed after it was healed."""
    length = max(1, (ended - started) // 10 + 1)  # 10 ms buckets
    acks = {worker: bytearray(length) for worker in pool_of}
    # a record was sent during a fault when one in its worker's scope was on (or had just
    # ended: 2 s), so a host's fault does not count another host's records as hit
    windows: dict[int, list[tuple[int, int]]] = {worker: [] for worker in pool_of}
    for f in faults:
        for worker in _scope(f, pool_of):
            windows[worker].append((f["start_ms"], f["end_ms"] + 2000))
    for series_of_worker in windows.values():
        series_of_worker.sort()
    quiet: Counter[int] = Counter()
    during: Counter[int] = Counter()
    acked = 0
    for name in os.listdir(directory):
        if not name.endswith(".hist"):
            continue
        worker = int(name[1:4])
        if worker not in acks:  # (a caller that asked for some workers' figures only)
            continue
        series = acks[worker]
        for e in read_history(os.path.join(directory, name)):
            if e.kind != ACKED:
                continue
            acked += 1
            bucket = (e.t_ms - started) // 10
            if 0 <= bucket < length:
                series[bucket] = 1
            sent = e.t_ms - e.latency_us // 1000
            if sent < started or sent > ended:
                continue
            hit = _in_windows(windows[worker], sent)
            (during if hit else quiet)[e.latency_us // 100] += 1
    by_kind: dict[str, dict[str, Any]] = {}
    for f in faults:
        scope = _scope(f, pool_of)
        gap, resumed = _longest_gap(acks, scope, f["start_ms"] - started, f["end_ms"] - started)
        entry = by_kind.setdefault(f["kind"], {"count": 0, "gaps_ms": [], "recovery_ms": []})
        entry["count"] += 1
        entry["gaps_ms"].append(gap)
        entry["recovery_ms"].append(resumed)
    summary = {
        kind: {"count": e["count"], "longest_gap_ms": max(e["gaps_ms"]),
               "median_gap_ms": int(statistics.median(e["gaps_ms"])),
               "max_recovery_ms": max(e["recovery_ms"]),
               "median_recovery_ms": int(statistics.median(e["recovery_ms"]))}
        for kind, e in sorted(by_kind.items())
    }  # fmt: skip
    return {"acked_logged": acked, "p50_ms_quiet": _percentile(quiet, 0.50),
            "p99_ms_quiet": _percentile(quiet, 0.99), "p50_ms_faults": _percentile(during, 0.5),
            "p99_ms_faults": _percentile(during, 0.99), "acks_quiet": sum(quiet.values()),
            "acks_during_faults": sum(during.values()), "by_fault": summary}  # fmt: skip


def _scope(fault: dict[str, Any], pool_of: dict[int, str]) -> list[int]:
    """Whose acks show a fault's effect: every worker for the broker and the network; the
    pool's workers for its Sender; the others for a worker's own death (its restart is not
    a stall of the rest)."""
    kind, target = fault["kind"], fault["target"]
    if kind in GLOBAL:
        return list(pool_of)
    if target.startswith("w") and target[1:].isdigit():
        victim = int(target[1:])
        if kind == "pool_full":  # (its pool waits behind the burst)
            return [w for w, p in pool_of.items() if p == pool_of[victim]]
        return [w for w in pool_of if w != victim]
    return [w for w, p in pool_of.items() if p == target] or list(pool_of)


def _in_windows(windows: list[tuple[int, int]], t: int) -> bool:
    at = bisect.bisect_right(windows, (t, 1 << 62))
    # (windows are sorted by start; overlapping ones: look back over a few)
    return any(s <= t <= e for s, e in windows[max(0, at - 8) : at])


def _longest_gap(acks: dict[int, bytearray], scope: list[int], start_ms: int,
                 end_ms: int) -> tuple[int, int]:  # fmt: skip
    """(the longest run without an ack in [start, end + 15 s], ms; when acks resumed after
    the fault's end, ms after it)."""
    first, last = max(0, start_ms // 10), end_ms // 10 + 1500
    any_ack = bytearray(last - first + 1)
    for worker in scope:
        series = acks[worker][first : last + 1]
        for i, v in enumerate(series):
            if v:
                any_ack[i] = 1
    longest = run = 0
    resumed = None
    end_at = end_ms // 10 - first
    for i, v in enumerate(any_ack):
        if v:
            if resumed is None and i >= end_at:
                resumed = (i - end_at) * 10
            run = 0
        else:
            run += 1
            longest = max(longest, run)
    return longest * 10, resumed if resumed is not None else (last - first) * 10


def _percentile(histogram: Counter[int], q: float) -> float | None:
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = q * total, 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return round(bucket / 10, 1)  # (buckets of 100 µs)
    return None


def print_report(report: dict[str, Any]) -> None:
    c = report["counts"]
    print(f"soak ({report['security']}, {report['duration_s']} s, seed {report['seed']}, "
          f"{report['dir']}): {'PASSED' if report['passed'] else 'FAILED'}")  # fmt: skip
    print(f"  rate: peak {report['peak_total']} records/s, paced at {report['paced_total']}")
    print(f"  records: {c.get('intended', 0)} sent, {c.get('acknowledged', 0)} acknowledged, "
          f"{c.get('read_back', 0)} read back, {c.get('refused', 0)} refused, "
          f"{c.get('failed', 0)} failed ({c.get('failed_yet_written', 0)} written anyway), "
          f"{c.get('pool_full_waits', 0)} sends found the pool full")  # fmt: skip
    print(
        f"  transactions: {c.get('transactions', 0)} ({c.get('txn_committed', 0)} committed, "
        f"{c.get('txn_aborted', 0)} aborted, {c.get('txn_unfinished', 0)} unfinished)"
    )
    print("  " + ", ".join(f"{k} {c.get(k, 0)}" for k in (*DEFECTS, "resolved_twice",
          "ack_mismatch", "txn_partial", "fire_and_forget_absent")))  # fmt: skip
    print(
        f"  left behind: {report['left_behind'] or 'nothing'}; hung processes: "
        f"{report['hung_processes'] or 'none'}; caught up: {report['caught_up']}"
    )
    print(
        f"  send→ack p50/p99 ms: quiet {report['p50_ms_quiet']}/{report['p99_ms_quiet']}, "
        f"during faults {report['p50_ms_faults']}/{report['p99_ms_faults']}"
    )
    if report.get("faults_required") is not None:
        print(f"  each kind needed at least {report['faults_required']} times")
    print("  fault                      n  longest gap ms  median gap  max recovery ms")
    for kind in KINDS:
        f = report["by_fault"].get(kind)
        n = report["faults"].get(kind, 0)
        if f is None:
            print(f"  {kind:<24} {n:>3}")
            continue
        print(f"  {kind:<24} {n:>3}  {f['longest_gap_ms']:>14}  {f['median_gap_ms']:>10}  "
              f"{f['max_recovery_ms']:>15}")  # fmt: skip
    m = report["memory"]
    for name in ("senders", "workers", "broker"):
        if name in m:
            x = m[name]
            print(
                f"  memory {name}: PSS {x['pss_mb_first']} → {x['pss_mb_last']} MB "
                f"(max {x['pss_mb_max']}), RSS {x['rss_mb_first']} → {x['rss_mb_last']} MB"
            )
    if report["auth_events"]:
        print(f"  SASL: {report['auth_events']}")
    for kind, lines in report["examples"].items():
        print(f"  {kind}: " + "; ".join(lines[:3]))
