"""``shmkafka perf --chart`` (perf/chart.py): the sweep's numbers are the lines drawn, on the
axes and scales named, one line per client in every panel, written as SVG and PNG."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from shmkafka.cli import main
from shmkafka.perf import chart

CLIENTS = ("shmkafka", "confluent-kafka")
SIZES = (100, 1000, 10_000, 100_000)
PROCESSES = (1, 4, 16)


def result(client: str, size: int, processes: int, rate: float) -> dict[str, Any]:
    return {
        "client": client, "durability": None, "record_size": size, "processes": processes,
        "records_per_s": rate, "mb_per_s": rate * size / 1e6,
        "latency_ms": {"p99": 1000 / rate * size}, "cpu_s": {"host": 3.0}, "pss_mb": 40.0,
    }  # fmt: skip


def sweep() -> list[dict[str, Any]]:
    return [
        result(c, s, p, rate=(2 if c == "shmkafka" else 1) * 1e6 / (s / 100) ** 0.5 * p**0.3)
        for c, s, p in itertools.product(CLIENTS, SIZES, PROCESSES)
    ]


def test_a_size_sweep_has_a_column_per_process_count_and_the_numbers_as_lines() -> None:
    results = sweep()
    fig = chart.figure(results, title="tansu; compressible values")
    axes = fig.get_axes()
    assert len(axes) == 3 * len(PROCESSES)
    grid = [axes[row * len(PROCESSES) : (row + 1) * len(PROCESSES)] for row in range(3)]
    assert [ax.get_title() for ax in grid[0]] == ["1 process", "4 processes", "16 processes"]
    assert [ax.get_ylabel() for ax in (grid[0][0], grid[1][0], grid[2][0])] == [
        "records/s", "MB/s of values", "p99 send→ack (ms)"]  # fmt: skip
    keys = ("records_per_s", "mb_per_s")
    for (row, key), (col, p) in itertools.product(enumerate(keys), enumerate(PROCESSES)):
        ax = grid[row][col]
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) == set(CLIENTS)
        for client, line in lines.items():
            mine = sorted((r for r in results if r["client"] == client and r["processes"] == p),
                          key=lambda r: r["record_size"])  # fmt: skip
            assert list(line.get_xdata()) == list(SIZES)
            assert list(line.get_ydata()) == [r[key] for r in mine]
    assert [t.get_text() for t in grid[2][0].get_xticklabels()] == ["100 B", "1 KB", "10 KB",
                                                                   "100 KB"]  # fmt: skip
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == list(CLIENTS)
    colours = {ln.get_label(): ln.get_color() for ax in axes for ln in ax.get_lines()}
    assert len(set(colours.values())) == len(CLIENTS)  # (one colour per client everywhere)


def test_one_size_puts_the_process_count_on_x() -> None:
    results = [r for r in sweep() if r["record_size"] == 1000]
    axes = chart.figure(results).get_axes()
    assert len(axes) == 3
    assert axes[2].get_xlabel() == "processes"
    assert [t.get_text() for t in axes[2].get_xticklabels()] == ["1", "4", "16"]
    line = next(ln for ln in axes[0].get_lines() if ln.get_label() == "shmkafka")
    assert list(line.get_xdata()) == list(PROCESSES)


def test_a_fleet_chart_draws_its_cost() -> None:
    axes = chart.figure([r for r in sweep() if r["record_size"] == 100], fleet=True).get_axes()
    assert [ax.get_ylabel() for ax in axes] == [
        "host CPU (s, app + Sender)", "PSS (MB)", "p99 send→ack (ms)"]  # fmt: skip


def test_svg_and_png_are_written_and_other_suffixes_refused(tmp_path: Path) -> None:
    svg, png = tmp_path / "sweep.svg", tmp_path / "sweep.png"
    chart.draw(sweep(), str(svg), title="the title")
    chart.draw(sweep(), str(png))
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    for shown in ("records/s", "MB/s of values", "16 processes", "100 KB", "confluent-kafka",
                  "the title"):  # fmt: skip
        assert shown in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match=r"must end in \.svg or \.png"):
        chart.draw(sweep(), str(tmp_path / "sweep.pdf"))


def test_a_missing_matplotlib_is_said_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = importlib.util.find_spec

    def find_spec(name: str, *more: Any) -> Any:
        return None if name == "matplotlib" else found(name, *more)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(SystemExit, match=r"needs matplotlib: pip install 'shmkafka\[perf\]'"):
        chart.check_path(str(tmp_path / "sweep.svg"))
    # and the perf command refuses it before it starts a broker or a process
    with pytest.raises(SystemExit, match="needs matplotlib"):
        main(["perf", "--duration", "1", "--chart", str(tmp_path / "sweep.svg")])


def test_a_run_that_left_records_without_a_result_is_a_cross_off_the_line() -> None:
    results = sweep()
    bad = next(r for r in results if r["client"] == "confluent-kafka" and r["processes"] == 16
               and r["record_size"] == 100_000)  # fmt: skip
    bad["unresolved"] = 127_240
    fig = chart.figure(results, title="tansu")
    ax = fig.get_axes()[2]  # records/s at 16 processes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["confluent-kafka"].get_xdata()) == [100, 1000, 10_000]
    cross = lines["_confluent-kafka without results"]
    assert cross.get_marker() == "x" and cross.get_linestyle() == "None"
    assert list(cross.get_xdata()) == [100_000] and list(cross.get_ydata()) == [
        bad["records_per_s"]
    ]
    assert fig.texts[-1].get_text().endswith("x: records left without a result (no rate)")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(CLIENTS)


def test_chart_from_draws_a_saved_run(tmp_path: Path) -> None:
    saved = tmp_path / "sweep.json"
    workload = {"duration_s": 20.0, "records": 0, "value_kind": "compressible",
                "compression": "lz4", "acks": "1", "linger_ms": 5, "partitions": 16,
                "fleet_rate": None}  # fmt: skip
    saved.write_text(json.dumps({"workload": workload, "broker": "Tansu", "results": sweep()}))
    out = tmp_path / "again.svg"
    assert main(["perf", "--chart-from", str(saved), "--chart", str(out)]) == 0
    text = out.read_text()
    assert "Tansu; compressible values, lz4, acks=1, linger 5 ms, 16 partitions; 20 s" in text
    assert "16 processes" in text and "confluent-kafka" in text
    with pytest.raises(SystemExit, match="--chart-from needs --chart"):
        main(["perf", "--chart-from", str(saved)])
