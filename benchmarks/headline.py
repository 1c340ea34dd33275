"""The headline figures of the benchmarks in one table: each figure, its target, its anchor and the ratio.

Run: `python benchmarks/headline.py [--write] [--note TEXT]` (`make bench` runs it with `--write`).
Every benchmark below runs in a process of its own with `--json`; the table is printed and, with
`--write`, replaces the one at the top of `benchmarks/RESULTS.md`. An anchor is what a figure is
measured against: a bare Ray actor call or a bare FastAPI endpoint in the same run, or a figure the
original SpaceTools reports (its Toolshed's 10 ms of I/O per call, Table 10 of the paper).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
START, END = "<!-- headline table: start -->", "<!-- headline table: end -->"
#: The original Toolshed's I/O overhead per call with no queueing (paper, Table 10: 10–11 ms).
ORIGINAL_CALL_US = 10_000.0


@dataclass
class Row:
    """One headline figure."""

    figure: str
    measured: str
    target: str
    anchor: str
    ratio: str
    met: bool | None


@dataclass
class Benchmark:
    """A benchmark script, its arguments and how its JSON becomes rows."""

    script: str
    args: tuple[str, ...]
    rows: Callable[[dict[str, Any]], list[Row]]


def _us(value: float) -> str:
    return f"{value:,.0f} µs"


def _scaleout_rows(report: dict[str, Any]) -> list[Row]:
    overhead = report["overhead"]
    us = overhead["per_call_us"]
    original = f"original Toolshed {ORIGINAL_CALL_US / 1000:g} ms (paper)"
    rows = [
        Row(
            "Toolshed call, in process, async method (runs on the server's loop)",
            _us(us["inprocess_async"]),
            "≤ 50 µs",
            original,
            f"{us['inprocess_async'] / ORIGINAL_CALL_US:.4f}",
            us["inprocess_async"] <= 50,
        ),
        Row(
            "Toolshed call, in process, sync method (its instance's thread)",
            _us(us["inprocess"]),
            "–",
            f"bare thread round trip {_us(us['bare_thread_round_trip'])}",
            f"{overhead['inprocess_over_bare_thread']:.2f}×",
            None,
        ),
        Row(
            "Toolshed call, worker process",
            _us(us["process"]),
            "≤ 150 µs",
            original,
            f"{us['process'] / ORIGINAL_CALL_US:.4f}",
            us["process"] <= 150,
        ),
        Row(
            "Toolshed call, Ray backend",
            _us(us["ray"]),
            "≤ 1.2× anchor",
            f"bare Ray actor call {_us(us['bare_ray_actor'])} (with one argument "
            f"{_us(us['bare_ray_actor_one_argument'])}: {overhead['ray_over_bare_actor_one_argument']:.2f}×)",
            f"{overhead['ray_over_bare_actor']:.2f}×",
            overhead["ray_over_bare_actor"] <= 1.2,
        ),
        Row(
            "Toolshed call over HTTP (in-process tool)",
            f"{_us(us['toolshed_http'])} (+{overhead['http_added_over_bare_fastapi_us'] / 1000:.2f} ms)",
            "≤ anchor + 1 ms",
            f"bare FastAPI echo {_us(us['bare_fastapi'])}",
            f"{overhead['http_over_bare_fastapi']:.2f}×",
            overhead["http_added_over_bare_fastapi_us"] <= 1000,
        ),
    ]
    batching = report["batching"]
    rows.append(
        Row(
            "Dynamic batching, batches of 8 (tiny BERT, 16 callers)",
            f"{batching['batch8_calls_per_s']:,.0f} calls/s",
            "≥ 3× anchor",
            f"unbatched {batching['unbatched_calls_per_s']:,.0f} calls/s",
            f"{batching['speedup_median']:.2f}×",
            batching["speedup_median"] >= 3,
        )
    )
    standby, fresh = report["autoscale"]["ray_standby"], report["autoscale"]["ray"]
    joined, fresh_joined = standby["first_instance_added_after_s"], fresh["first_instance_added_after_s"]
    rows.append(
        Row(
            "Ray autoscaling: first actor added after a load step (warm standby)",
            "none added" if joined is None else f"{joined:.2f} s",
            "< 1 s",
            "a fresh actor " + ("none added" if fresh_joined is None else f"{fresh_joined:.2f} s"),
            f"{joined / fresh_joined:.2f}×" if joined and fresh_joined else "–",
            joined is not None and joined < 1.0,
        )
    )
    paper = report["paper_8_calls_1s_tool"]
    slowest = max(paper.values(), key=lambda entry: entry["3_instances_s"])
    rows.append(
        Row(
            "8 calls to a 1 s tool on 3 instances (slowest backend; the paper: 2.7 s, plain HTTP 8.5 s)",
            f"{slowest['3_instances_s']:.2f} s",
            "–",
            "ideal 3 s (3 rounds of 1 s)",
            f"{slowest['3_instances_s'] / 3:.3f}×",
            None,
        )
    )
    return rows


def _throughput_rows(report: dict[str, Any]) -> list[Row]:
    efficiency = report["min_efficiency"]
    cloud = report["variables"]["point_cloud"]
    return [
        Row(
            "Pool efficiency, 50 ms tool, 32 callers (worst of 1–8 instances)",
            f"{efficiency:.3f}",
            "≥ 0.9",
            "ideal: instances / latency",
            f"{efficiency:.3f}",
            efficiency >= 0.9,
        ),
        Row(
            f"{cloud['shape'][0]:,}-point cloud passed by reference",
            f"{cloud['by_reference_ms']:,.1f} ms",
            "–",
            f"by value as JSON {cloud['by_value_ms']:,.0f} ms",
            f"{cloud['by_reference_ms'] / cloud['by_value_ms']:.4f} ({cloud['speedup']:,.0f}× faster)",
            None,
        ),
    ]


def _rollout_rows(report: dict[str, Any]) -> list[Row]:
    return [
        Row(
            f"{report['episodes']} concurrent episodes against sequential",
            f"{report['speedup']:.1f}×",
            f"≥ {report['target_efficiency']:g} of ideal",
            f"ideal {report['ideal_speedup']}×",
            f"{report['efficiency']:.3f}",
            report["meets_target"],
        )
    ]


def _render_rows(report: dict[str, Any]) -> list[Row]:
    table_only = next(run for run in report["runs"] if not run["with_robot"])
    rows = []
    for resolution, figures in table_only["resolutions"].items():
        rows.append(
            Row(
                f"Simulated render {resolution}, one core",
                f"{figures['views_per_s']:.1f} views/s",
                f"≥ {figures['target_views_per_s']:g} views/s",
                "–",
                "–",
                figures["meets_target"],
            )
        )
    return rows


def _expert_eval_rows(report: dict[str, Any]) -> list[Row]:
    questions = f"{report['questions']:,}"
    eval_s, target_s, stretch_s = report["eval_s"], report["eval_target_s"], report["eval_stretch_s"]
    return [
        Row(
            f"SpatialSim: generating {questions} questions (`data generate --n {report['n']} --seed {report['seed']}`)",
            f"{report['generate_s']:.0f} s",
            f"≤ {report['generate_target_s']:g} s",
            "–",
            "–",
            report["generate_s"] <= report["generate_target_s"],
        ),
        Row(
            f"Exact evaluation of the scripted expert on them ({questions} episodes, report included)",
            f"{eval_s:.0f} s",
            f"≤ {target_s:g} s (stretch {stretch_s:g} s)",
            "–",
            "–",
            eval_s <= target_s,
        ),
    ]


BENCHMARKS = (
    Benchmark("toolshed_scaleout.py", (), _scaleout_rows),
    Benchmark("toolshed_throughput.py", (), _throughput_rows),
    Benchmark("rollout_throughput.py", (), _rollout_rows),
    Benchmark("sim_render.py", (), _render_rows),
    Benchmark("expert_eval.py", (), _expert_eval_rows),
)


def run(benchmark: Benchmark) -> tuple[list[Row], dict[str, Any], dict[str, Any] | None]:
    """Run one benchmark: its rows, where and when it ran, and its JSON report (None when it failed,
    and one row says so)."""
    command = ["python", f"benchmarks/{benchmark.script}", *benchmark.args, "--json"]
    load = round(os.getloadavg()[0], 1)
    began = datetime.now(timezone.utc)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(HERE / benchmark.script), *benchmark.args, "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")},
    )
    where = {
        "command": " ".join(command),
        "date": began.strftime("%Y-%m-%d %H:%M UTC"),
        "load": load,
        "seconds": round(time.perf_counter() - started),
    }
    report = _json_report(done.stdout) if done.returncode == 0 else None
    if report is None:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        failure = f"failed (exit code {done.returncode}): {reason}"
        return [Row(benchmark.script, failure, "–", "–", "–", False)], where, None
    return benchmark.rows(report), where, report


def _json_report(stdout: str) -> dict[str, Any] | None:
    """The JSON object a benchmark printed (indented or on one line, last), or None."""
    for text in (stdout, *(line for line in reversed(stdout.splitlines()) if line.startswith("{"))):
        try:
            report = json.loads(text)
        except ValueError:
            continue
        if isinstance(report, dict):
            return report
    return None


def table(results: list[tuple[list[Row], dict[str, Any], Any]], note: str | None) -> str:
    """The markdown table of every row, each with its benchmark's command, date and load."""
    lines = [
        "| figure | measured | target | anchor | ratio to anchor | met | command | date, 1-min load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rows, where, _report in results:
        for row in rows:
            met = "–" if row.met is None else ("yes" if row.met else "**no**")
            lines.append(
                f"| {row.figure} | {row.measured} | {row.target} | {row.anchor} | {row.ratio} | {met} "
                f"| `{where['command']}` | {where['date']}, {where['load']:g} |"
            )
    total = sum(where["seconds"] for _, where, _report in results)
    footer = f"\n\n`make bench` ({total // 60} min {total % 60} s on {os.cpu_count()} cores)."
    return "\n".join(lines) + footer + (f" {note}" if note else "")


def write(text: str) -> None:
    """Put `text` between the headline markers of RESULTS.md (before its first section if absent)."""
    results = RESULTS.read_text()
    block = f"{START}\n{text}\n{END}"
    if START in results and END in results:
        head, rest = results.split(START, 1)
        results = head + block + rest.split(END, 1)[1]
    else:
        head, section, rest = results.partition("\n## ")
        results = f"{head.rstrip()}\n\n## Headline figures\n\n{block}\n\n{section.strip()} {rest}"
    RESULTS.write_text(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the table at the top of RESULTS.md")
    parser.add_argument("--note", help="a sentence written under the table (e.g. what else ran)")
    parser.add_argument("--raw", type=Path, help="also write every benchmark's JSON report to this file")
    args = parser.parse_args()
    outcome = [run(benchmark) for benchmark in BENCHMARKS]
    if args.raw is not None:
        args.raw.write_text(json.dumps({where["command"]: report for _, where, report in outcome}, indent=1))
    text = table(outcome, args.note)
    if args.write:
        write(text)
    print(text)
