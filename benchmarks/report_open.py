"""The evaluation report at scale: build the report of an N-sample run (default 1,000) through the real
report code, and time how long headless Chromium takes to open it.

The rows are synthesised over real SpatialSim samples (tests/report_rows.py: real scenes, real scorer,
tool calls with pictures as large as the tools'), so no episode runs. "Open" is the wall time of
`chromium --headless --dump-dom` (load, parse, the filter script) and of `--screenshot` (also layout
and paint) on the report, less the same command on an empty page (the browser's own start), each the
median of --repeats runs, as wall time and as the CPU time of all of Chromium's processes (the steadier
figure on a shared machine).

    python benchmarks/report_open.py --samples 1000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parents[1] / "tests")]

from report_rows import synthesized_rows  # noqa: E402
from spacetools.bench.dataset import load_samples  # noqa: E402
from spacetools.bench.report import write_report  # noqa: E402
from spacetools.bench.spatialsim import generator  # noqa: E402
from spacetools.bench.summary import summarize  # noqa: E402


def chromium_seconds(browser: str, url: str, action: list[str], repeats: int) -> tuple[float, float]:
    """The median wall time and CPU time (all of Chromium's processes) of one headless Chromium command
    on ``url``. On a shared machine the CPU time is the steadier figure."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", *action, url],
            capture_output=True,
            check=True,
            timeout=300,
        )
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, Any] = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_1min": round(os.getloadavg()[0], 2),
        "samples": args.samples,
    }
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        generator.export(root / "data", n=2, seed=11)
        rows, samples = synthesized_rows(load_samples(root / "data"), args.samples)
        started = time.perf_counter()
        summary = summarize(rows, policy="scripted", profile="realistic", data="synthesised")
        figures["summary_s"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        (root / "run").mkdir()
        page = write_report(root / "run" / "report.html", summary, rows, samples)
        figures["report_build_s"] = round(time.perf_counter() - started, 2)
        figures["report_html_mb"] = round(page.stat().st_size / 1e6, 2)
        side = list((root / "run" / "report_files").iterdir())
        figures["side_files"] = len(side)
        figures["side_files_mb"] = round(sum(p.stat().st_size for p in side) / 1e6, 2)
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        if browser is not None:
            blank = root / "blank.html"
            blank.write_text("<!DOCTYPE html><html><body></body></html>")
            for name, action in (
                ("dump_dom", ["--dump-dom"]),
                ("screenshot", [f"--screenshot={root / 'shot.png'}", "--window-size=1280,1600"]),
            ):
                empty, empty_cpu = chromium_seconds(browser, blank.as_uri(), action, args.repeats)
                full, full_cpu = chromium_seconds(browser, page.as_uri(), action, args.repeats)
                figures[f"chromium_{name}_blank_s"] = round(empty, 2)
                figures[f"chromium_{name}_report_s"] = round(full, 2)
                figures[f"open_{name}_s"] = round(full - empty, 2)
                figures[f"open_{name}_cpu_s"] = round(full_cpu - empty_cpu, 2)
    print(json.dumps(figures, indent=2) if args.json else figures)


if __name__ == "__main__":
    main()
