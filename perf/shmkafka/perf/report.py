"""What ``shmkafka perf`` prints: one row per client and sweep point, then the ratios of each
shmkafka client to each peer; for ``--fleet`` the cost of the same paced load instead."""

from __future__ import annotations

import statistics
from typing import Any

from shmkafka.perf.workload import SHMKAFKA_CLIENTS, Workload


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(client: str, work: Workload, results: list[dict[str, Any]],
              broker_cpu: float) -> dict[str, Any]:  # fmt: skip
    """One client's run from its processes' reports."""
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    records = sum(r["sent"] for r in results)
    latencies = [x for r in results for x in r["latencies_ms"]]
    app_cpu = sum(r["cpu"] for r in results)
    connections = sum(r["connections"] for r in results)
    if client in SHMKAFKA_CLIENTS:  # one Sender, one pool: its counters are shared
        sender_cpu, requests, wire, batches, commits = (
            max(r[k][1] for r in results) - min(r[k][0] for r in results)
            for k in ("sender_cpu", "requests", "bytes", "batches", "commits")
        )
        rss = sum(r["rss"] for r in results) + max(r["sender_rss"] for r in results)
        pss = sum(r["pss"] for r in results) + max(r["sender_pss"] for r in results)
        connections += max(r["sender_connections"] for r in results)
    else:
        sender_cpu, batches, commits = 0.0, 0, 0
        requests = sum(r["requests"][1] - r["requests"][0] for r in results)
        wire = sum(r["bytes"][1] - r["bytes"][0] for r in results)
        rss = sum(r["rss"] for r in results)
        pss = sum(r["pss"] for r in results)
    per = max(records, 1)
    return {
        "client": client, "durability": work.pool_durability if commits else None,
        "commits": commits, "commits_per_s": commits / seconds,
        "records_per_commit": records / commits if commits else None,
        "processes": work.processes, "record_size": work.record_size,
        "value_kind": work.value_kind, "rate_per_process": work.per_process_rate(),
        "duration_s": work.duration_s,
        "records_per_process": None if work.duration_s is not None else work.records,
        "records": records, "seconds": seconds, "records_per_s": records / seconds,
        "mb_per_s": records * work.record_size / seconds / 1e6,
        "latency_ms": {
            "avg": statistics.fmean(latencies) if latencies else float("nan"),
            "p50": _percentile(latencies, 0.50), "p95": _percentile(latencies, 0.95),
            "p99": _percentile(latencies, 0.99), "p99.9": _percentile(latencies, 0.999),
            "max": max(latencies, default=float("nan")), "samples": len(latencies),
        },
        "cpu_s": {"app": app_cpu, "sender": sender_cpu, "host": app_cpu + sender_cpu,
                  "broker": broker_cpu},
        "cpu_us_per_record": (app_cpu + sender_cpu) / per * 1e6,
        # an app process's thread wakes a second (its waits that ended: voluntary switches)
        "app_wakes_per_s": sum(r.get("wakes", 0) for r in results) / seconds / len(results),
        "peak_rss_mb": rss / 1e6, "pss_mb": pss / 1e6, "connections": connections,
        "produce_requests": requests, "wire_bytes": wire,
        # shmkafka's Sender: its record batches, and its CPU per batch and per MB of values
        "batches": batches or None,
        "sender_us_per_batch": sender_cpu / batches * 1e6 if batches else None,
        "sender_ms_per_mb": sender_cpu / max(records * work.record_size / 1e6, 1e-9) * 1e3,
        "requests_per_million": requests / per * 1e6,
        "errors": sum(r["errors"] for r in results),
        # records left without a result when the bounded flush gave up, and its longest wait
        "unresolved": sum(r.get("unresolved", 0) for r in results),
        "flush_s": max(r.get("flush_s", 0.0) for r in results),
        "config": results[0]["config"],
    }  # fmt: skip


def better(fleet: bool, result: dict[str, Any], best: dict[str, Any] | None) -> bool:
    """Whether a repeat beats the best so far: more records/s, or for a fleet less CPU."""
    if best is None:
        return True
    if fleet:
        return bool(result["cpu_s"]["host"] < best["cpu_s"]["host"])
    return bool(result["records_per_s"] > best["records_per_s"])


HEADER = (
    f"{'client':<18} {'P':>2} {'size':>6} {'records/s':>11} {'MB/s':>6} {'avg ms':>7} "
    f"{'p50':>7} {'p95':>7} {'p99':>7} {'p99.9':>7} {'max':>7} {'app CPU':>8} {'Sender':>7} "
    f"{'broker':>7} {'µs/rec':>7} {'RSS MB':>7} {'PSS MB':>7} {'req/M':>7} {'errors':>6}"
)


def label(r: dict[str, Any]) -> str:
    """The client, and a durable pool's mode: "shmkafka/sync"."""
    return str(r["client"]) + (f"/{r['durability']}" if r.get("durability") else "")


def format_row(r: dict[str, Any]) -> str:
    lat, cpu = r["latency_ms"], r["cpu_s"]
    return (
        f"{label(r):<18} {r['processes']:>2} {r['record_size']:>6} "
        f"{r['records_per_s']:>11,.0f} {r['mb_per_s']:>6.1f} {lat['avg']:>7.1f} "
        f"{lat['p50']:>7.1f} {lat['p95']:>7.1f} {lat['p99']:>7.1f} {lat['p99.9']:>7.1f} "
        f"{lat['max']:>7.1f} {cpu['app']:>8.2f} {cpu['sender']:>7.2f} {cpu['broker']:>7.2f} "
        f"{r['cpu_us_per_record']:>7.2f} {r['peak_rss_mb']:>7.0f} {r['pss_mb']:>7.0f} "
        f"{r['requests_per_million']:>7.0f} {r['errors']:>6}"
    )


FLEET_HEADER = (
    f"{'client':<18} {'P':>3} {'size':>6} {'rec/s/proc':>10} {'records':>9} {'host CPU':>8} "
    f"{'% core':>6} {'app CPU':>7} {'Sender':>6} {'broker':>6} {'wakes/s':>7} {'PSS MB':>7} "
    f"{'conns':>5} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}"
)


def format_fleet_row(r: dict[str, Any]) -> str:
    """host CPU: app + Sender CPU seconds; % core: host CPU over the run's wall time;
    wakes/s: an app process's thread wakes a second."""
    lat, cpu = r["latency_ms"], r["cpu_s"]
    per_process = r["records_per_s"] / r["processes"]
    return (
        f"{r['client']:<18} {r['processes']:>3} {r['record_size']:>6} {per_process:>10,.0f} "
        f"{r['records']:>9,} {cpu['host']:>8.2f} {cpu['host'] / r['seconds'] * 100:>6.1f} "
        f"{cpu['app']:>7.2f} {cpu['sender']:>6.2f} {cpu['broker']:>6.2f} "
        f"{r.get('app_wakes_per_s', 0):>7.0f} {r['pss_mb']:>7.0f} "
        f"{r['connections']:>5} {lat['p50']:>7.1f} {lat['p99']:>7.1f} {r['errors']:>6}"
    )


def _points(results: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return list(dict.fromkeys((r["record_size"], r["processes"]) for r in results))


def _point_name(size: int, processes: int, sizes: int) -> str:
    return f"P={processes}" if sizes == 1 else f"P={processes} {size} B"


def unresolved_lines(results: list[dict[str, Any]]) -> list[str]:
    """A line per run that left records without a result (a bug of the client: the run
    fails), with how long its flush waited for them."""
    return [
        f"UNRESOLVED {r['client']} P={r['processes']} {r['record_size']} B: "
        f"{r['unresolved']} records without a result after a flush of {r['flush_s']:.1f} s"
        for r in results if r.get("unresolved")
    ]  # fmt: skip


def summary_lines(results: list[dict[str, Any]], fleet: bool = False) -> list[str]:
    """Per sweep point, each shmkafka client against each peer: its throughput as a multiple
    of theirs; for a fleet, its host CPU and PSS as multiples of theirs, and the
    connections of each."""
    lines = []
    points = _points(results)
    sizes = len({size for size, _ in points})
    for size, processes in points:
        row = {label(r): r for r in results
               if (r["record_size"], r["processes"]) == (size, processes)}  # fmt: skip
        peers = [c for c in row if row[c]["client"] not in SHMKAFKA_CLIENTS]
        name = _point_name(size, processes, sizes)
        for ours in (c for c in row if row[c]["client"] in SHMKAFKA_CLIENTS):
            mine = row[ours]
            if fleet:
                lines.append(
                    f"fleet {name}: {ours}: " + _fleet_ratios(mine, [row[p] for p in peers])
                )
                continue
            others = [f"{mine['records_per_s'] / row[c]['records_per_s']:.2f}x {c}"
                      for c in peers if row[c]["records_per_s"]]  # fmt: skip
            if others:
                lines.append(f"summary {name}: {ours} = {', '.join(others)}")
            if mine.get("durability"):
                lines.append(
                    f"commits {name}: {ours}: {mine['commits_per_s']:,.0f} msyncs/s, "
                    f"{mine['records_per_commit']:,.1f} records per msync"
                )
    return lines


def _fleet_ratios(mine: dict[str, Any], peers: list[dict[str, Any]]) -> str:
    def ratio(key: str, get: Any) -> str:
        parts = [f"{get(mine) / get(p):.2f}x {p['client']}" for p in peers if get(p)]
        return f"{key} {', '.join(parts)}" if parts else f"{key} -"

    conns = ", ".join(f"{p['client']} {p['connections']}" for p in peers)
    return "; ".join([
        ratio("host CPU", lambda r: r["cpu_s"]["host"]),
        ratio("PSS", lambda r: r["pss_mb"]),
        f"connections {mine['connections']}" + (f" ({conns})" if conns else ""),
    ])  # fmt: skip
