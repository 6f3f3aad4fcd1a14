"""``shmkafka perf --chart FILE``: the sweep drawn, as SVG or PNG (by the file's suffix).

Rules:
- matplotlib (the ``perf`` extra) is imported only here, and only when a chart is asked for.
- A sweep of several record sizes puts the size on x (log scale), one column per process
  count; a sweep of one size puts the process count on x. The rows are records/s and MB/s
  of values (log scales: the sizes span three orders of magnitude) and the p99 send→ack
  latency beside them; one line per client, the same colour in every panel, one legend.
- A ``--fleet`` run draws its cost instead: host CPU, PSS and p99 by process count.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shmkafka.perf.report import label

FORMATS = (".svg", ".png")
NO_MATPLOTLIB = "--chart needs matplotlib: pip install 'shmkafka[perf]'"
Row = tuple[str, Callable[[dict[str, Any]], float]]
SWEEP_ROWS: tuple[Row, ...] = (
    ("records/s", lambda r: r["records_per_s"]),
    ("MB/s of values", lambda r: r["mb_per_s"]),
    ("p99 send→ack (ms)", lambda r: r["latency_ms"]["p99"]),
)
FLEET_ROWS: tuple[Row, ...] = (
    ("host CPU (s, app + Sender)", lambda r: r["cpu_s"]["host"]),
    ("PSS (MB)", lambda r: r["pss_mb"]),
    ("p99 send→ack (ms)", lambda r: r["latency_ms"]["p99"]),
)


def size_name(size: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("KB", 1000)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def check_path(path: str) -> None:
    """Refuse a suffix matplotlib would not write, or a missing matplotlib, before a long
    run, not after it."""
    if Path(path).suffix.lower() not in FORMATS:
        raise SystemExit(f"--chart {path}: the file must end in .svg or .png")
    if importlib.util.find_spec("matplotlib") is None:
        raise SystemExit(NO_MATPLOTLIB)


def draw(results: list[dict[str, Any]], path: str, fleet: bool = False, title: str = "") -> None:
    check_path(path)
    fig = figure(results, fleet, title)
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    print(f"chart written to {path}")


def figure(results: list[dict[str, Any]], fleet: bool = False, title: str = "") -> Any:
    """The matplotlib Figure of the sweep (``draw`` writes it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        matplotlib.rcParams["svg.fonttype"] = "none"  # (SVG text stays text: smaller, findable)
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(NO_MATPLOTLIB) from None
    sizes = sorted({r["record_size"] for r in results})
    processes = sorted({r["processes"] for r in results})
    by_size = len(sizes) > 1 and not fleet
    on_x = "record_size" if by_size else "processes"
    columns = processes if by_size else [None]
    rows = FLEET_ROWS if fleet else SWEEP_ROWS
    clients = list(dict.fromkeys(label(r) for r in results))
    colours = {c: f"C{i}" for i, c in enumerate(clients)}
    fig, axes = plt.subplots(len(rows), len(columns), squeeze=False, sharex=True, sharey="row",
                             figsize=(3.6 * len(columns) + 1.4, 2.6 * len(rows) + 0.8))  # fmt: skip
    for col, column in enumerate(columns):
        for row, (name, value) in enumerate(rows):
            ax = axes[row][col]
            for client in clients:
                mine = [r for r in results if label(r) == client
                        and (column is None or r["processes"] == column)]  # fmt: skip
                mine.sort(key=lambda r: r[on_x])
                whole = [r for r in mine if not r.get("unresolved")]
                ax.plot([r[on_x] for r in whole], [value(r) for r in whole], marker="o",
                        color=colours[client], label=client)  # fmt: skip
                # a run that left records without a result has no rate: a cross, unjoined
                cut = [r for r in mine if r.get("unresolved")]
                if cut:
                    ax.plot([r[on_x] for r in cut], [value(r) for r in cut], marker="x",
                            markersize=9, linestyle="none", color=colours[client],
                            label=f"_{client} without results")  # fmt: skip
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
            if col == 0:
                ax.set_ylabel(name)
            if row == 0 and column is not None:
                ax.set_title(f"{column} process{'es' if column > 1 else ''}")
            if row == len(rows) - 1:
                _x_axis(ax, sizes if by_size else processes, by_size)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(clients), 4), frameon=False)
    if any(r.get("unresolved") for r in results):
        title += "; x: records left without a result (no rate)"
    if title:
        fig.suptitle(title, y=0.005, va="bottom", fontsize="small")
    fig.tight_layout(rect=(0, 0.03 if title else 0, 1, 0.95))
    return fig


def _x_axis(ax: Any, ticks: list[int], by_size: bool) -> None:
    ax.set_xscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_name(t) for t in ticks] if by_size else [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("record size" if by_size else "processes")
