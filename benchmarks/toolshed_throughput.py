"""Toolshed throughput: router overhead, pool efficiency, and variables by reference against by value.

Run: `python benchmarks/toolshed_throughput.py --json` (one JSON object on stdout).
(a) overhead per call of a no-op tool over a direct call, in-process and in worker processes;
(b) efficiency = measured throughput / (instances / latency) for a 50 ms tool under 32 callers;
(c) passing a depth map and a point cloud as "$name" references against as JSON values, at sizes the
    Toolshed still takes by value (`arguments.MAX_ARGUMENT_ELEMENTS`: a 480×640 depth map or a
    300k-point cloud written into the arguments is refused, and must be passed as a variable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import numpy as np

from spacetools.tools.diagnostics import EchoTool, SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed

LATENCY_S = 0.05
CALLERS = 32


def _direct_noop_us(repeats: int) -> float:
    tool = SleepTool()
    started = time.perf_counter()
    for _ in range(repeats):
        tool.noop()
    return (time.perf_counter() - started) / repeats * 1e6


async def _noop_us(backend: str, repeats: int) -> float:
    async with Toolshed([ToolDeployment(tool=SleepTool, backend=backend)]) as shed:
        session = shed.open_session([])
        for _ in range(50):  # warm-up
            await session.call("sleep.noop")
        started = time.perf_counter()
        for _ in range(repeats):
            await session.call("sleep.noop")
        return (time.perf_counter() - started) / repeats * 1e6


async def _efficiency(instances: int, calls_per_caller: int) -> dict[str, float]:
    deployment = ToolDeployment(tool=SleepTool, backend="process", instances=instances)
    async with Toolshed([deployment]) as shed:
        sessions = [shed.open_session([], seed=caller) for caller in range(CALLERS)]

        async def caller(session: Any) -> None:
            for _ in range(calls_per_caller):
                result = await session.call("sleep.sleep", {"seconds": LATENCY_S})
                assert not result.is_error, result.text

        started = time.perf_counter()
        await asyncio.gather(*(caller(session) for session in sessions))
        elapsed = time.perf_counter() - started
    throughput = CALLERS * calls_per_caller / elapsed
    ideal = instances / LATENCY_S
    return {
        "throughput_per_s": round(throughput, 2),
        "ideal_per_s": ideal,
        "efficiency": round(throughput / ideal, 4),
    }


async def _reference_vs_value(repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    arrays = {
        "depth_map": rng.uniform(0.5, 1.5, (240, 320)).astype(np.float32),
        "point_cloud": rng.uniform(-1, 1, (24_000, 3)).astype(np.float32),
    }
    out: dict[str, Any] = {}
    async with Toolshed([ToolDeployment(tool=EchoTool, backend="process")]) as shed:
        session = shed.open_session([])
        for name, array in arrays.items():
            session.set_variable(name, array)
            by_reference, by_value = [], []
            for _ in range(repeats):
                started = time.perf_counter()
                result = await session.call("echo.describe", {"data": f"${name}"})
                by_reference.append(time.perf_counter() - started)
                assert not result.is_error, result.text
                started = time.perf_counter()
                # What a plain HTTP tool API does: the client writes the array into the JSON arguments.
                result = await session.call("echo.describe", json.dumps({"data": array.tolist()}))
                by_value.append(time.perf_counter() - started)
                assert not result.is_error, result.text
            ref_ms, value_ms = statistics.median(by_reference) * 1e3, statistics.median(by_value) * 1e3
            out[name] = {
                "shape": list(array.shape),
                "by_reference_ms": round(ref_ms, 2),
                "by_value_ms": round(value_ms, 2),
                "speedup": round(value_ms / ref_ms, 1),
            }
    return out


async def main(quick: bool) -> dict[str, Any]:
    repeats = 200 if quick else 2000
    direct_us = _direct_noop_us(repeats * 10)
    inprocess_us = await _noop_us("inprocess", repeats)
    process_us = await _noop_us("process", repeats)
    efficiency = {
        str(instances): await _efficiency(instances, calls_per_caller=2 if quick else 8)
        for instances in (1, 2, 4, 8)
    }
    return {
        "overhead": {
            "direct_call_us": round(direct_us, 3),
            "inprocess_call_us": round(inprocess_us, 1),
            "process_call_us": round(process_us, 1),
            "inprocess_overhead_us": round(inprocess_us - direct_us, 1),
            "process_overhead_us": round(process_us - direct_us, 1),
        },
        "pool": {"latency_s": LATENCY_S, "callers": CALLERS, "instances": efficiency},
        "min_efficiency": min(entry["efficiency"] for entry in efficiency.values()),
        "variables": await _reference_vs_value(repeats=3 if quick else 10),
    }


if __name__ == "__main__":  # the guard also keeps worker processes from re-running the benchmark
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a smoke run")
    args = parser.parse_args()
    report = asyncio.run(main(args.quick))
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
