"""What a thread hop costs, with the CPUs idle and kept awake: a bare hop beside in-process Toolshed calls.

A call to a plain tool method on the in-process backend crosses to its instance's thread and back; an
`async def` method runs on the event loop with no hop. On a virtual machine most of a hop is the wake-up
of an idle virtual CPU, so each figure is measured twice: alone, and with a busy process at the lowest
priority keeping the other CPU awake. Paths alternate within each round; the figures are medians.

    python benchmarks/thread_hop.py [--rounds 5] [--calls 2000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from spacetools.tools.diagnostics import SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed
from toolshed_scaleout import bare_thread_round_trip


async def _measure(rounds: int, calls: int) -> dict[str, float]:
    hop, stop_hop = bare_thread_round_trip()
    async with Toolshed([ToolDeployment(tool=SleepTool, backend="inprocess")]) as shed:
        session = shed.open_session([])
        paths: dict[str, Callable[[], Awaitable[Any]]] = {
            "bare_hop": hop,
            "sync_call": functools.partial(session.call, "sleep.noop"),
            "async_call": functools.partial(session.call, "sleep.noop_async"),
        }
        samples: dict[str, list[float]] = {name: [] for name in paths}
        for path in paths.values():  # warm-up
            for _ in range(200):
                await path()
        for _ in range(rounds):
            for name, path in paths.items():
                started = time.perf_counter()
                for _ in range(calls):
                    await path()
                samples[name].append((time.perf_counter() - started) / calls * 1e6)
    stop_hop()
    return {name: round(statistics.median(values), 1) for name, values in samples.items()}


@contextlib.contextmanager
def _other_cpu_kept_awake() -> Iterator[None]:
    spinner = subprocess.Popen([sys.executable, "-c", "import os; os.nice(19)\nwhile True: pass"])
    try:
        time.sleep(0.5)
        yield
    finally:
        spinner.kill()
        spinner.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    idle = asyncio.run(_measure(args.rounds, args.calls))
    with _other_cpu_kept_awake():
        awake = asyncio.run(_measure(args.rounds, args.calls))
    report = {"us_per_call_idle": idle, "us_per_call_other_cpu_awake": awake, "load_1min": round(load, 2)}
    if args.json:
        print(json.dumps(report))
        return
    for name in idle:
        print(f"{name:>10}: {idle[name]:6.1f} µs idle, {awake[name]:6.1f} µs with the other CPU awake")
    print(f"1-minute load before: {load:.2f}")


if __name__ == "__main__":
    main()
