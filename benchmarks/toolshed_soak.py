"""Toolshed soak over HTTP: faults, overload and many sessions against one server process.

Run: `python benchmarks/toolshed_soak.py --json` (quick: 2,000 calls) or `--calls 10000` (the full
soak). The server runs in its own process (`uvicorn`, as `spacetools serve` runs it) with a FaultTool
pool in worker processes.

(a) calls: `--calls` single-call requests from `--clients` concurrent clients, 5% crashing the worker,
    5% hanging past the tool's timeout, the rest echoing a unique token. Every call must be answered
    exactly once with its own result (the echo of its token, a crash error or a timeout error), and
    the p99 latency must stay within the deadline (longest queue wait + the tool's timeout).
(b) sessions: `--sessions` sessions each upload an image and store a 400 KB variable; the server's
    session memory (images and variables) must stay under its cap, and so must its RSS growth
    (with 64 MB of slack for the allocator).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from served import server_in_subprocess
from spacetools.kit import imagecodec

TIMEOUT_S = 0.5  # the FaultTool's per-call timeout
QUEUE_WAIT_S = 1.0  # the server's max_queue_wait_s
DEADLINE_S = TIMEOUT_S + QUEUE_WAIT_S
INSTANCES = 8
MEMORY_CAP = 128 * 2**20
RSS_SLACK = 64 * 2**20

SERVER = """
import sys, uvicorn
from spacetools.tools.diagnostics import FaultTool
from spacetools.toolshed import ToolDeployment
from spacetools.toolshed.slow_clients import server_options
from spacetools.toolshed.http import create_app, return_freed_memory, toolshed_for
from spacetools.toolshed.limits import ServerLimits

return_freed_memory()  # as `spacetools serve` does

limits = ServerLimits(max_sessions=4096, max_total_bytes={cap}, max_session_bytes=8 * 2**20,
                      max_queue_wait_s={queue_wait}, max_calls_in_flight=4096)
deployment = ToolDeployment(tool=FaultTool, backend="process", instances={instances}, timeout_s={timeout})
app = create_app(toolshed_for([deployment], limits), limits)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            **server_options(limits))
"""


@contextlib.contextmanager
def server_process() -> Iterator[tuple[str, int]]:
    """The server in a subprocess; yields its base URL and process id."""
    code = SERVER.format(cap=MEMORY_CAP, queue_wait=QUEUE_WAIT_S, instances=INSTANCES, timeout=TIMEOUT_S)
    with server_in_subprocess(code) as (url, process):
        yield url, process.pid


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and its children (the worker processes), from /proc."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            pid_here = int(fields["Pid"])
            if pid_here == pid and "VmRSS" in fields:
                total += int(fields["VmRSS"].split()[0]) * 1024
    return total


def plan(calls: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    kinds = ["crash"] * (calls // 20) + ["hang"] * (calls // 20)
    kinds += ["echo"] * (calls - len(kinds))
    rng.shuffle(kinds)
    return kinds


async def soak_calls(url: str, calls: int, clients: int, seed: int) -> dict[str, Any]:
    kinds = plan(calls, seed)
    answers: list[list[dict[str, Any]] | None] = [None] * calls
    latencies = np.zeros(calls)
    outcomes: Counter[str] = Counter()
    next_index = iter(range(calls))

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            session_id = (await http.post("/sessions", json={"images": []})).json()["id"]
            for index in next_index:
                kind = kinds[index]
                name, arguments = {
                    "crash": ("fault.crash", {}),
                    "hang": ("fault.hang", {"seconds": 30}),
                    "echo": ("fault.echo", {"text": f"token {index}"}),
                }[kind]
                started = time.perf_counter()
                response = await http.post(
                    f"/sessions/{session_id}/calls", json=[{"name": name, "arguments": arguments}]
                )
                latencies[index] = time.perf_counter() - started
                answers[index] = response.json() if response.status_code == 200 else None
                if response.status_code != 200:
                    outcomes[f"HTTP {response.status_code}"] += 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    # Exactly once, and its own: an echo carries its call's token, and every other answer is an error
    # of a kind this call could get (no result of another call, none missing).
    wrong: list[tuple[int, str, str]] = []
    for index, (kind, answer) in enumerate(zip(kinds, answers, strict=True)):
        if answer is None or len(answer) != 1:
            wrong.append((index, kind, "no answer"))
            continue
        text = answer[0]["text"]
        if text.startswith(f"Error: TimeoutError: fault.{kind} waited"):
            outcomes["queue timeout"] += 1
        elif text.startswith(f"Error: TimeoutError: fault.{kind} did not finish"):
            outcomes[f"{kind} timed out"] += 1
        elif kind == "echo" and text == f"token {index}":
            outcomes["echo"] += 1
        elif kind == "crash" and text.startswith("Error: RuntimeError: the fault instance crashed"):
            outcomes["crash reported"] += 1
        else:
            wrong.append((index, kind, text[:120]))
    p50, p99 = np.percentile(latencies, [50, 99])
    router = httpx.get(f"{url}/stats").json()["tools"]["fault"]
    return {
        "calls": calls,
        "clients": clients,
        "answered_exactly_once": calls - len(wrong),
        "wrong_or_missing": len(wrong),
        "wrong_examples": wrong[:5],
        "outcomes": dict(outcomes),
        "elapsed_s": round(elapsed, 1),
        "latency_s": {
            "p50": round(float(p50), 3),
            "p99": round(float(p99), 3),
            "max": round(latencies.max(), 3),
        },
        "router_latency_p99_s": round(router["latency_ms"]["p99"] / 1000, 3),
        "deadline_s": DEADLINE_S,
        "p99_within_deadline": bool(p99 <= DEADLINE_S),
        "router_p99_within_deadline": router["latency_ms"]["p99"] / 1000 <= DEADLINE_S,
    }


async def soak_sessions(url: str, pid: int, sessions: int, clients: int) -> dict[str, Any]:
    image = imagecodec.to_data_url(np.random.default_rng(0).integers(0, 255, (128, 128, 3), dtype=np.uint8))
    rss_before = rss_bytes(pid)
    refused: Counter[int] = Counter()
    peak_memory = 0
    remaining = iter(range(sessions))

    async def client() -> None:
        nonlocal peak_memory
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for _ in remaining:
                opened = await http.post("/sessions", json={"images": [image]})
                if opened.status_code != 201:
                    refused[opened.status_code] += 1
                    continue
                session_id = opened.json()["id"]
                body = [{"name": "fault.make_array", "arguments": {"n": 100_000}}]
                await http.post(f"/sessions/{session_id}/calls", json=body)
                memory = (await http.get("/stats")).json()["sessions"]
                peak_memory = max(peak_memory, memory["variable_bytes"] + memory["image_bytes"])

    await asyncio.gather(*(client() for _ in range(clients)))
    stats = httpx.get(f"{url}/stats").json()["sessions"]
    rss_growth = rss_bytes(pid) - rss_before
    return {
        "sessions": sessions,
        "open": stats["open"],
        "refused": {str(code): count for code, count in refused.items()},
        "evictions": stats["evictions"],
        "peak_session_memory_mb": round(peak_memory / 2**20, 1),
        "cap_mb": MEMORY_CAP / 2**20,
        "server_rss_growth_mb": round(rss_growth / 2**20, 1),
        "under_cap": peak_memory <= MEMORY_CAP and rss_growth <= MEMORY_CAP + RSS_SLACK,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with server_process() as (url, pid):
        results = {
            "load_1min": round(os.getloadavg()[0], 1),
            "calls": asyncio.run(soak_calls(url, args.calls, args.clients, args.seed)),
            "sessions": asyncio.run(soak_sessions(url, pid, args.sessions, args.clients)),
        }
    print(json.dumps(results, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
