"""``shmkafka perf``: the side-by-side comparison of shmkafka's kafka-python and confluent-kafka
APIs (``shmkafka``: ``shmkafka.KafkaProducer``; ``shmkafka-confluent``:
``shmkafka.confluent_kafka.Producer``)
with kafka-python and confluent-kafka on the same machine, broker and workload, in one run.

    shmkafka perf                                  # 4 processes on the embedded broker_stub
    shmkafka perf --compare kafka-python,confluent-kafka --broker tansu --records 250000
    shmkafka perf --scale --duration 10 --json out.json --chart out.svg
    shmkafka perf --record-size 100,1000,10000,100000 --megabytes 300 --value-kind realistic
    shmkafka perf --fleet 500 --processes 32 --record-size 200 --duration 20 \\
        --compare shmkafka-confluent,confluent-kafka

Every client runs at its own defaults but for the workload's settings (compression, acks,
linger, idempotence); ``--batch-size``, ``--buffer-memory`` and ``--max-in-flight`` are
given to every client only when set.

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
import queue
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, replace
from typing import Any

from shmkafka.perf import chart, report
from shmkafka.perf.brokers import RunningBroker, run_broker_stub, run_tansu
from shmkafka.perf.clients import cpu_seconds, run_worker
from shmkafka.perf.workload import (
    CLIENTS,
    DURABILITY_MODES,
    SHMKAFKA_CLIENTS,
    VALUE_KINDS,
    Workload,
)
from shmkafka.protocol.errors import KafkaError
from shmkafka.protocol.other_api_errors import TopicAlreadyExistsError
from shmkafka.sender import admin

EPILOG = """\
Defaults: every client runs at its own batch size, buffer memory and in-flight limit
(nothing is passed: librdkafka's batch.size, for one, is not kafka-python's batch_size);
--batch-size, --buffer-memory and --max-in-flight give every client the same value.
Compression, acks, linger and idempotence are the workload's, given to every client.

When a run stops: --duration S (seconds per client and sweep point), --megabytes MB (MB of
values per client and sweep point, split among its processes: a --record-size sweep then
moves the same bytes at every size), or --records N per process (the default, 100,000;
with --fleet the default is --duration 10). Give at most one of them.

--fleet R paces every process at R records/s and reports what that load costs each client:
host CPU (app processes + shmkafka's Sender), broker CPU, PSS, broker connections (TCP
connections of the app processes and the Sender to the bootstrap servers' ports, counted at
the end of the timed loop) and p50/p99 send->ack latency.
"""


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("an empty list")
    return values


def _positive_list(text: str) -> list[int]:
    values = _int_list(text)
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"every value must be at least 1: {text!r}")
    return values


def _size_list(text: str) -> list[int]:
    values = _int_list(text)
    if min(values) < 0:
        raise argparse.ArgumentTypeError(f"a record size cannot be negative: {text!r}")
    return values


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="shmkafka perf", description=__doc__)
    p.epilog = EPILOG
    p.formatter_class = _epilog_as_is(p.formatter_class)
    p.add_argument("--processes", "-p", type=_positive_list, default="4",
                   help="processes per client; a comma list sweeps them (1,4,8,16)")  # fmt: skip
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--records", "-n", type=int,
                      help="records per process (default: 100000)")  # fmt: skip
    stop.add_argument("--duration", type=float, help="seconds per client and sweep point")
    stop.add_argument("--megabytes", type=float, metavar="MB",
                      help="MB (10^6 bytes) of values per client and sweep point, split among its "
                           "processes")  # fmt: skip
    p.add_argument("--record-size", type=_size_list, default="100",
                   help="bytes per value; a comma list sweeps them (100,1000,10000)")  # fmt: skip
    p.add_argument("--value-kind", choices=VALUE_KINDS, default="compressible",
                   help="compressible: one random value for every record (lz4 ~100x); "
                        "realistic: distinct JSON-like texts from a seeded RNG (lz4 ~2x), "
                        "made before the timed part")  # fmt: skip
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
    p.add_argument("--compression-level", type=int, help="(not given to kafka-python 3)")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--batch-size", type=int,
                   help="bytes, for every client (default: each client's own)")  # fmt: skip
    p.add_argument("--buffer-memory", type=int,
                   help="bytes, for every client that has a bound (kafka-python 3 has none; "
                        "librdkafka: queue.buffering.max.kbytes) (default: each client's "
                        "own)")  # fmt: skip
    p.add_argument("--idempotence", action="store_true", help="(needs --acks all)")
    p.add_argument("--max-in-flight", type=int,
                   help="requests per connection, for every client (default: each "
                        "client's own)")  # fmt: skip
    rate = p.add_mutually_exclusive_group()
    rate.add_argument("--throughput", type=float,
                      help="cap, total records/s (for latency runs)")  # fmt: skip
    rate.add_argument("--fleet", type=float, metavar="R",
                      help="pace every process at R records/s and report the cost "
                           "(see below)")  # fmt: skip
    p.add_argument("--pool-durability", type=_durability_list, default="memory",
                   help="shmkafka's pool: memory, flush or sync; a comma list runs each "
                        "shmkafka client once per mode (durable modes need --idempotence "
                        "--acks all)")  # fmt: skip
    p.add_argument("--pool-dir", help="the durable pools' directory (default: a new one in "
                                      "/var/tmp, removed after the run)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=1000, help="records per process, untimed")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per client; the best is kept (for --fleet: the least host "
                        "CPU)")  # fmt: skip
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compare", default="",
                   help="beside shmkafka, also: shmkafka-confluent (shmkafka's "
                        "confluent-kafka API), kafka-python, confluent-kafka")  # fmt: skip
    p.add_argument("--clients", help="exactly these clients, in this order (instead of "
                                     "shmkafka plus --compare)")  # fmt: skip
    p.add_argument("--broker", choices=("stub", "tansu"), default="stub")
    p.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", metavar="HOST:PORT",
                   help="a running cluster instead of starting one")  # fmt: skip
    p.add_argument("--scale", action="store_true", help="sweep processes 1, 2, 4, 8")
    p.add_argument("--json", help="write the results to this file")
    p.add_argument(
        "--chart",
        "--plot",
        dest="chart",
        metavar="FILE.svg|FILE.png",
        help="draw the sweep into this file (needs matplotlib: the perf extra)",
    )
    p.add_argument("--chart-from", metavar="FILE.json",
                   help="no run: draw --chart from the results a --json run wrote")  # fmt: skip
    p.add_argument("--quiet", action="store_true")
    return p


def _epilog_as_is(formatter: Any) -> Any:
    """The parser's formatter, keeping the epilog's paragraphs as written."""

    class Formatter(formatter):  # type: ignore[misc]
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            return "".join(indent + line for line in text.splitlines(keepends=True))

    return Formatter


def _durability_list(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in DURABILITY_MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(DURABILITY_MODES)}: {text!r}")
    return modes


def workload_of(args: argparse.Namespace) -> Workload:
    """The first sweep point's workload (``sweep`` gives every point's)."""
    duration = args.duration
    if (
        args.fleet is not None
        and duration is None
        and args.records is None
        and args.megabytes is None
    ):
        duration = 10.0
    records = args.records if args.records is not None else 100_000
    return Workload(
        processes=args.processes[0], records=records, duration_s=duration,
        record_size=args.record_size[0], value_kind=args.value_kind, keys=args.keys,
        key_count=args.key_count, partitions=args.partitions, topic=args.topic or "",
        acks=args.acks, compression=args.compression,
        compression_level=args.compression_level, linger_ms=args.linger_ms,
        batch_size=args.batch_size, buffer_memory=args.buffer_memory,
        idempotence=args.idempotence, max_in_flight=args.max_in_flight,
        throughput=args.throughput, fleet_rate=args.fleet, warmup=args.warmup, seed=args.seed,
    )  # fmt: skip


def process_counts(args: argparse.Namespace) -> list[int]:
    if args.scale and len(args.processes) > 1:
        raise SystemExit("--scale sweeps 1, 2, 4, 8: give it or a --processes list, not both")
    return [1, 2, 4, 8] if args.scale else list(args.processes)


def sweep(base: Workload, args: argparse.Namespace) -> list[Workload]:
    """Every sweep point's workload: each record size, then each process count."""
    points = []
    for size in args.record_size:
        for processes in process_counts(args):
            work = replace(base, record_size=size, processes=processes)
            points.append(work if args.megabytes is None else work.with_megabytes(args.megabytes))
    return points


def clients_of(args: argparse.Namespace) -> list[str]:
    named = args.clients.split(",") if args.clients else ["shmkafka", *args.compare.split(",")]
    clients = list(dict.fromkeys(c.strip() for c in named if c.strip()))
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown or not clients:
        raise SystemExit(f"unknown client(s) {unknown}: choose from {', '.join(CLIENTS)}")
    return clients


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
    results = _collect(out, workers, work, progress, client, quiet)
    broker_cpu = cpu_seconds(broker_pid) - broker_cpu if broker_pid else 0.0
    _join(workers, 60)
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        raise RuntimeError(f"{client}: {failed[0]}")
    return report.summarize(client, work, results, broker_cpu)


def _join(workers: list[Any], timeout: float) -> None:
    """Wait for the workers to exit, by their exit status: ``Process.join(timeout)`` waits
    on a pipe that the Sender a worker started holds open too (it inherits the worker's
    descriptors), so it would wait for the Sender's exit, 5 s after the last producer."""
    deadline = time.monotonic() + timeout
    while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.01)


def _collect(out: Any, workers: list[Any], work: Workload, progress: list[Any], client: str,
             quiet: bool) -> list[dict[str, Any]]:  # fmt: skip
    """Every worker's report; a worker that died without one is reported as failed (never
    waited for). The progress bar is drawn only on a terminal."""
    bar = None
    if not quiet and sys.stderr.isatty():
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
        except queue.Empty:
            if bar is not None:
                bar.n = sum(p.value for p in progress)
                bar.refresh()
            dead = [w for w in workers if w.exitcode not in (None, 0)]
            if dead and out.empty():
                results.append({"error": f"a worker exited with status {dead[0].exitcode}"})
    if bar is not None:
        bar.close()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    if args.chart_from:
        return _chart_from(args.chart_from, args.chart)
    clients = clients_of(args)
    if args.pool_durability != ["memory"] and not args.idempotence:
        raise SystemExit("--pool-durability flush or sync needs --idempotence (and --acks all)")
    base = workload_of(args)
    if args.chart:
        chart.check_path(args.chart)
    points = sweep(base, args)
    fleet = args.fleet is not None
    results: list[dict[str, Any]] = []
    with _broker(args) as (bootstrap, broker_pid, broker_name), _pool_dir(args) as pool_dir:
        print(f"{_describe(base, args)}; broker: {broker_name}")
        print(report.FLEET_HEADER if fleet else report.HEADER)
        for work in points:
            for client, run_work in _runs(work, clients, args, pool_dir):
                best: dict[str, Any] | None = None
                for _ in range(args.repeat):
                    result = run_client(client, bootstrap, broker_pid, run_work, args.quiet,
                                        args.keep_topics)  # fmt: skip
                    if report.better(fleet, result, best):
                        best = result
                assert best is not None
                results.append(best)
                row = report.format_fleet_row(best) if fleet else report.format_row(best)
                print(row, flush=True)
    for line in report.summary_lines(results, fleet):
        print(line)
    unresolved = report.unresolved_lines(results)
    for line in unresolved:
        print(line, file=sys.stderr)
    if args.json:
        sweep_of = {"processes": process_counts(args), "record_sizes": args.record_size,
                    "megabytes": args.megabytes, "clients": clients}  # fmt: skip
        with open(args.json, "w") as f:
            json.dump({"workload": asdict(base), "sweep": sweep_of, "broker": broker_name,
                       "results": results}, f, indent=2)  # fmt: skip
    if args.chart:
        chart.draw(results, args.chart, fleet, _title(asdict(base), broker_name))
    return 1 if unresolved else 0


def _chart_from(path: str, out: str | None) -> int:
    """--chart-from: the chart of a run's --json file, as that run would have drawn it."""
    if not out:
        raise SystemExit("--chart-from needs --chart FILE.svg|FILE.png")
    chart.check_path(out)
    with open(path) as f:
        saved = json.load(f)
    work = saved["workload"]
    chart.draw(saved["results"], out, work.get("fleet_rate") is not None,
               _title(work, saved["broker"]))  # fmt: skip
    return 0


def _title(work: dict[str, Any], broker: str) -> str:
    duration = f"{work['duration_s']:g} s" if work["duration_s"] else f"{work['records']:,} records"
    return (f"{broker}; {work['value_kind']} values, {work['compression']}, "
            f"acks={work['acks']}, linger {work['linger_ms']} ms, {work['partitions']} "
            f"partitions; {duration} per client and point")  # fmt: skip


def _runs(work: Workload, clients: list[str], args: argparse.Namespace,
          pool_dir: str) -> Iterator[tuple[str, Workload]]:  # fmt: skip
    """Each client's run of a sweep point: a shmkafka client's once per pool durability."""
    for client in clients:
        modes = args.pool_durability if client in SHMKAFKA_CLIENTS else ["memory"]
        for mode in modes:
            yield client, replace(work, pool_durability=mode,
                                  pool_dir=pool_dir if mode != "memory" else "")  # fmt: skip


@contextmanager
def _pool_dir(args: argparse.Namespace) -> Iterator[str]:
    """The durable pools' directory: --pool-dir, else a new one on a disk (/var/tmp, not
    /tmp, which is often a tmpfs), removed afterwards; "" when every mode is memory."""
    if args.pool_dir or args.pool_durability == ["memory"]:
        yield args.pool_dir or ""
        return
    made = tempfile.mkdtemp(prefix="shmkafka-perf-", dir="/var/tmp")
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _describe(base: Workload, args: argparse.Namespace) -> str:
    counts = process_counts(args)
    processes = "P" if len(counts) > 1 else str(counts[0])
    sizes = ",".join(str(s) for s in args.record_size)
    amount = None if args.megabytes is None else f"{args.megabytes:g} MB in all"
    return base.describe(processes=processes, sizes=sizes, amount=amount)


if __name__ == "__main__":
    sys.exit(main())
