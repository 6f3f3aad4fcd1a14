"""``shmkafka exporter``: the pools' producer metrics for Prometheus, over HTTP.

Every ``--interval`` seconds each pool of this user (or ``--pool``) is sampled from shared
memory (pool/metrics.py: no lock taken, nothing written, so scraping never slows a producer);
a scrape of ``/metrics`` answers the latest sample. Rates and averages are over the last
``--window`` seconds, as Kafka's own metrics (30 s by default).

Names: the Java producer's metric, with ``-`` as ``_``, after ``kafka_producer_`` (the pool's
own metrics after ``shmkafka_``); each sample is labelled with its pool. A ``...-total``
metric is a Prometheus counter (``kafka_producer_record_send_total``), the rest gauges.
Needs the optional ``prometheus-client`` (``pip install 'shmkafka[metrics]'``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from shmkafka.pool.metrics import COUNTER, METRICS, Metric, PoolWatcher

DEFAULT_PORT = 9464


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="HTTP port to serve /metrics on (0: any free port, printed)",
    )
    parser.add_argument(
        "--address", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)"
    )
    parser.add_argument("--pool", help="only this pool (default: every pool of this user)")
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between samples of the pools",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="rates and averages are over this many seconds",
    )
    return parser  # fmt: skip


def prometheus_name(metric: Metric) -> str:
    """The metric's Prometheus name (a counter's without the ``_total`` the client adds)."""
    name = ("shmkafka_" if metric.own else "kafka_producer_") + metric.name.replace("-", "_")
    return name.removesuffix("_total") if metric.kind == COUNTER else name


class PoolCollector:
    """Answers a scrape with the latest sample of every pool (taken by ``Sampler``)."""

    def __init__(self) -> None:
        self.latest: dict[str, dict[str, float]] = {}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        pools = self.latest  # (replaced whole by the sampler: never seen half-written)
        for metric in METRICS:
            kind = CounterMetricFamily if metric.kind == COUNTER else GaugeMetricFamily
            family = kind(prometheus_name(metric), metric.help, labels=["pool"])
            for pool, values in sorted(pools.items()):
                family.add_metric([pool], values[metric.name])
            yield family


class Sampler(threading.Thread):
    def __init__(self, watcher: PoolWatcher, collector: PoolCollector, interval_s: float) -> None:
        super().__init__(name="shmkafka-exporter-sampler", daemon=True)
        self.watcher, self.collector, self.interval_s = watcher, collector, interval_s
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                self.collector.latest = self.watcher.sample()
                if self.stopped.wait(self.interval_s):
                    return
        except Exception as exc:  # noqa: BLE001 (reported, and the exporter exits 1)
            self.error = exc
        finally:
            self.watcher.close()
            self.stopped.set()


def run(args: argparse.Namespace) -> int:
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        print("shmkafka exporter: needs prometheus-client (pip install 'shmkafka[metrics]')",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.interval <= 0 or args.window <= 0:
        print("shmkafka exporter: --interval and --window must be more than 0", file=sys.stderr)
        return 2
    collector = PoolCollector()
    # A --pool that does not exist (yet, or any more) is served with no samples: an app's
    # pool comes and goes with its producers, and the exporter outlives them.
    watcher = PoolWatcher(args.pool, args.window, must_exist=False)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    try:
        server, _ = start_http_server(args.port, args.address, registry=registry)
    except OSError as exc:
        print(f"shmkafka exporter: cannot listen on {args.address}:{args.port}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    sampler = Sampler(watcher, collector, args.interval)
    signal.signal(signal.SIGTERM, _stop)
    print(f"shmkafka exporter: serving http://{args.address}:{server.server_port}/metrics",
          flush=True)  # fmt: skip
    sampler.start()
    try:
        sampler.stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        sampler.stopped.set()
        sampler.join(5)
        server.shutdown()
    if sampler.error is not None:
        print(f"shmkafka exporter: sampling failed: {sampler.error!r}", file=sys.stderr)
        return 1
    return 0


def _stop(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise KeyboardInterrupt
