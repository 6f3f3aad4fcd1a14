"""``shmkafka perf``: the side-by-side comparison of shmkafka with kafka-python and
confluent-kafka on the same machine, broker and workload, in one run.

    shmkafka perf                                  # 4 processes on the embedded broker_stub
    shmkafka perf --compare kafka-python,confluent-kafka --broker tansu --records 250000
    shmkafka perf --scale --duration 10 --json out.json --plot out.png

Each client runs P processes (one producer each; one shared pool for shmkafka) that start
together at a barrier; a run is timed from the barrier until every process has every record
acknowledged. CPU seconds of the app processes, of shmkafka's Sender and of the broker are
measured apart; RSS is the peak of each app process, summed (plus the Sender's); PSS (shared
pages counted once) is taken at the end of the run, summed the same way.

Each run produces into a fresh topic (or ``--topic``) that shmkafka's own admin client
(``shmkafka.sender.admin``: CreateTopics, DeleteTopics) creates first; a fresh topic is
deleted when its run ends, failed or not, unless ``--keep-topics``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, replace
from typing import Any

from shmkafka.perf.brokers import RunningBroker, run_broker_stub, run_tansu
from shmkafka.perf.clients import cpu_seconds, run_worker
from shmkafka.perf.workload import CLIENTS, Workload
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.other_api_errors import TopicAlreadyExistsError
from shmkafka.sender import admin


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="shmkafka perf", description=__doc__)
    p.add_argument("--processes", "-p", type=int, default=4)
    p.add_argument("--records", "-n", type=int, default=100_000, help="per process")
    p.add_argument("--duration", type=float, help="seconds per run instead of --records")
    p.add_argument("--record-size", type=int, default=100)
    p.add_argument("--keys", choices=("none", "uniform", "zipf"), default="uniform")
    p.add_argument("--key-count", type=int, default=10_000)
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--topic", help="default: a fresh topic per run")
    p.add_argument("--keep-topics", action="store_true",
                   help="keep the fresh topics the runs create (by default each is deleted "
                        "when its run ends; a --topic is never deleted)")  # fmt: skip
    p.add_argument("--acks", choices=("0", "1", "all"), default="1")
    p.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"),
                   default="lz4")  # fmt: skip
    p.add_argument("--compression-level", type=int)
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16384)
    p.add_argument("--buffer-memory", type=int, default=32 * 1024 * 1024)
    p.add_argument("--idempotence", action="store_true", help="(needs --acks all)")
    p.add_argument("--max-in-flight", type=int, default=5)
    p.add_argument("--throughput", type=float, help="cap, total records/s (for latency runs)")
    p.add_argument("--warmup", type=int, default=1000, help="records per process, untimed")
    p.add_argument("--repeat", type=int, default=1, help="runs per client; the best is kept")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compare", default="", help="also: kafka-python,confluent-kafka")
    p.add_argument("--broker", choices=("stub", "tansu"), default="stub")
    p.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
                   help="a running cluster instead of starting one")  # fmt: skip
    p.add_argument("--scale", action="store_true", help="sweep processes 1, 2, 4, 8")
    p.add_argument("--json", help="write the results to this file")
    p.add_argument("--plot", help="write a PNG chart to this file (needs matplotlib)")
    p.add_argument("--quiet", action="store_true")
    return p


def workload_of(args: argparse.Namespace) -> Workload:
    return Workload(
        processes=args.processes, records=args.records, duration_s=args.duration,
        record_size=args.record_size, keys=args.keys, key_count=args.key_count,
        partitions=args.partitions, topic=args.topic or "", acks=args.acks,
        compression=args.compression, compression_level=args.compression_level,
        linger_ms=args.linger_ms, batch_size=args.batch_size, buffer_memory=args.buffer_memory,
        idempotence=args.idempotence, max_in_flight=args.max_in_flight,
        throughput=args.throughput, warmup=args.warmup, seed=args.seed,
    )  # fmt: skip


@contextmanager
def _broker(args: argparse.Namespace) -> Iterator[tuple[str, int | None, str]]:
    """(bootstrap, broker pid or None, name) for the run."""
    if args.bootstrap:
        yield args.bootstrap, None, args.bootstrap
        return
    starter: AbstractContextManager[RunningBroker] = (
        run_tansu() if args.broker == "tansu" else run_broker_stub(partitions=args.partitions)
    )
    with starter as broker:
        yield broker.bootstrap, broker.pid, "Tansu" if args.broker == "tansu" else "broker_stub"


ADMIN_TIMEOUT_MS = 30_000


def _create_topic(bootstrap: str, topic: str, partitions: int) -> bool:
    """Create the topic (replication factor 1); False if it existed already."""
    errors = admin.create_topics(
        bootstrap, [admin.NewTopic(topic, partitions, 1)], timeout_ms=ADMIN_TIMEOUT_MS
    )
    admin.raise_errors(errors, ignore=(TopicAlreadyExistsError,))
    return errors[topic] is None


def _delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a topic a run created; a failure is reported, not raised (the run's result,
    or its own error, matters more than a topic left behind)."""
    try:
        admin.raise_errors(admin.delete_topics(bootstrap, [topic], timeout_ms=ADMIN_TIMEOUT_MS))
    except KafkaError as exc:
        print(f"shmkafka perf: could not delete topic {topic!r}: {exc}", file=sys.stderr)


def run_client(client: str, bootstrap: str, broker_pid: int | None, work: Workload,
               quiet: bool, keep_topics: bool = False) -> dict[str, Any]:  # fmt: skip
    """One run of one client: P processes from a barrier to the last acknowledgement, on
    ``work.topic`` or on a fresh topic, deleted afterwards unless ``keep_topics``."""
    topic = work.topic or f"perf-{client}-{uuid.uuid4().hex[:8]}"
    created = _create_topic(bootstrap, topic, work.partitions)
    try:
        return _run_processes(client, bootstrap, broker_pid, replace(work, topic=topic), quiet)
    finally:
        if created and not work.topic and not keep_topics:
            _delete_topic(bootstrap, topic)


def _run_processes(client: str, bootstrap: str, broker_pid: int | None, work: Workload,
                   quiet: bool) -> dict[str, Any]:  # fmt: skip
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(work.processes + 1), ctx.Queue()
    progress = [ctx.Value("q", 0, lock=False) for _ in range(work.processes)]
    pool = f"perf-{uuid.uuid4().hex[:10]}"
    workers = [
        ctx.Process(target=run_worker,
                    args=(client, bootstrap, work, i, barrier, out, progress[i], pool))
        for i in range(work.processes)
    ]  # fmt: skip
    for w in workers:
        w.start()
    barrier.wait(300)  # every producer is connected and warmed up
    broker_cpu = cpu_seconds(broker_pid) if broker_pid else 0.0
    results = _collect(out, work, progress, client, quiet)
    broker_cpu = cpu_seconds(broker_pid) - broker_cpu if broker_pid else 0.0
    for w in workers:
        w.join(60)
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        raise RuntimeError(f"{client}: {failed[0]}")
    return summarize(client, work, results, broker_cpu)


def _collect(out: Any, work: Workload, progress: list[Any], client: str,
             quiet: bool) -> list[dict[str, Any]]:  # fmt: skip
    bar = None
    if not quiet:
        try:
            from tqdm import tqdm

            total = None if work.duration_s else work.records * work.processes
            bar = tqdm(total=total, desc=client, unit="rec", leave=False, file=sys.stderr)
        except ImportError:
            bar = None
    results: list[dict[str, Any]] = []
    while len(results) < work.processes:
        try:
            results.append(out.get(timeout=0.25))
        except Exception:  # noqa: BLE001 - queue.Empty: show progress and wait on
            if bar is not None:
                bar.n = sum(p.value for p in progress)
                bar.refresh()
    if bar is not None:
        bar.close()
    return results


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(client: str, work: Workload, results: list[dict[str, Any]],
              broker_cpu: float) -> dict[str, Any]:  # fmt: skip
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    records = sum(r["sent"] for r in results)
    latencies = [x for r in results for x in r["latencies_ms"]]
    app_cpu = sum(r["cpu"] for r in results)
    if client == "shmkafka":  # one Sender, one pool: its counters are shared
        sender_cpu, requests, wire = (
            max(r[k][1] for r in results) - min(r[k][0] for r in results)
            for k in ("sender_cpu", "requests", "bytes")
        )
        rss = sum(r["rss"] for r in results) + max(r["sender_rss"] for r in results)
        pss = sum(r["pss"] for r in results) + max(r["sender_pss"] for r in results)
    else:
        sender_cpu = 0.0
        requests = sum(r["requests"][1] - r["requests"][0] for r in results)
        wire = sum(r["bytes"][1] - r["bytes"][0] for r in results)
        rss = sum(r["rss"] for r in results)
        pss = sum(r["pss"] for r in results)
    return {
        "client": client, "processes": work.processes, "records": records,
        "seconds": seconds, "records_per_s": records / seconds,
        "mb_per_s": records * work.record_size / seconds / 1e6,
        "latency_ms": {
            "avg": statistics.fmean(latencies) if latencies else float("nan"),
            "p50": _percentile(latencies, 0.50), "p95": _percentile(latencies, 0.95),
            "p99": _percentile(latencies, 0.99), "p99.9": _percentile(latencies, 0.999),
            "max": max(latencies, default=float("nan")), "samples": len(latencies),
        },
        "cpu_s": {"app": app_cpu, "sender": sender_cpu, "broker": broker_cpu},
        "cpu_us_per_record": (app_cpu + sender_cpu) / records * 1e6,
        "peak_rss_mb": rss / 1e6, "pss_mb": pss / 1e6,
        "produce_requests": requests, "wire_bytes": wire,
        "requests_per_million": requests / records * 1e6,
        "errors": sum(r["errors"] for r in results),
    }  # fmt: skip


HEADER = (
    f"{'client':<16} {'P':>2} {'records/s':>11} {'MB/s':>6} {'avg ms':>7} {'p50':>6} {'p95':>6} "
    f"{'p99':>7} {'p99.9':>7} {'max':>7} {'app CPU':>8} {'Sender':>7} {'broker':>7} "
    f"{'µs/rec':>7} {'RSS MB':>7} {'PSS MB':>7} {'req/M':>7} {'errors':>6}"
)


def format_row(r: dict[str, Any]) -> str:
    lat, cpu = r["latency_ms"], r["cpu_s"]
    return (
        f"{r['client']:<16} {r['processes']:>2} {r['records_per_s']:>11,.0f} "
        f"{r['mb_per_s']:>6.1f} {lat['avg']:>7.1f} {lat['p50']:>6.1f} {lat['p95']:>6.1f} "
        f"{lat['p99']:>7.1f} {lat['p99.9']:>7.1f} {lat['max']:>7.1f} {cpu['app']:>8.2f} "
        f"{cpu['sender']:>7.2f} {cpu['broker']:>7.2f} {r['cpu_us_per_record']:>7.2f} "
        f"{r['peak_rss_mb']:>7.0f} {r['pss_mb']:>7.0f} {r['requests_per_million']:>7.0f} "
        f"{r['errors']:>6}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    clients = ["shmkafka", *[c for c in args.compare.split(",") if c]]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        raise SystemExit(f"unknown client(s) {unknown}: choose from {', '.join(CLIENTS)}")
    base = workload_of(args)
    sweep = [1, 2, 4, 8] if args.scale else [base.processes]
    results: list[dict[str, Any]] = []
    with _broker(args) as (bootstrap, broker_pid, broker_name):
        print(f"{base.describe().replace(f'{base.processes} processes', 'P processes')}; "
              f"broker: {broker_name}")  # fmt: skip
        print(HEADER)
        for processes in sweep:
            work = replace(base, processes=processes)
            for client in clients:
                best: dict[str, Any] | None = None
                for _ in range(args.repeat):
                    result = run_client(client, bootstrap, broker_pid, work, args.quiet,
                                        args.keep_topics)  # fmt: skip
                    if best is None or result["records_per_s"] > best["records_per_s"]:
                        best = result
                assert best is not None
                results.append(best)
                print(format_row(best), flush=True)
    _summary(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": asdict(base), "broker": broker_name, "results": results}, f,
                      indent=2)  # fmt: skip
    if args.plot:
        plot(results, args.plot)
    return 0


def _summary(results: list[dict[str, Any]]) -> None:
    for processes in sorted({r["processes"] for r in results}):
        row = {r["client"]: r["records_per_s"] for r in results if r["processes"] == processes}
        ours = row.get("shmkafka")
        others = [f"{ours / v:.2f}x {c}" for c, v in row.items() if c != "shmkafka" and v]
        if ours and others:
            print(f"summary P={processes}: shmkafka = {', '.join(others)}")


def plot(results: list[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'shmkafka[perf]'") from None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for client in dict.fromkeys(r["client"] for r in results):
        mine = [r for r in results if r["client"] == client]
        xs = [r["processes"] for r in mine]
        left.plot(xs, [r["records_per_s"] for r in mine], marker="o", label=client)
        right.plot(xs, [r["latency_ms"]["p99"] for r in mine], marker="o", label=client)
    left.set(xlabel="processes", ylabel="records/s", title="throughput")
    right.set(xlabel="processes", ylabel="ms", title="p99 send→ack latency")
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart written to {path}")


if __name__ == "__main__":
    sys.exit(main())
