"""Toolshed under pressure over HTTP: `/health` while hostile bodies arrive, and 1,000 calls at once.

Run: `python benchmarks/toolshed_pressure.py --json`. The server runs in its own process (`uvicorn`, as
`spacetools serve` runs it) with the server's default limits but for the ones named below; run it
with `PYTHONPATH` at another checkout's `src` to measure that code side by side.

(a) hostile: `--hostile-clients` clients post call bodies of `--hostile-mb` MB of points (about 14 bytes
    a point) without pause, for `--seconds`, while a prober reads `/health` every 20 ms. Reported: the
    probe latency percentiles (target p99 < 100 ms) and what the hostile posts got. Each body also goes
    once with no one else posting, as the reference of its cost.
(b) burst: `--burst` requests of one call each (a 50 ms sleep) at once, each on its own raw
    connection, against 8 in-process instances with a 1.5 s tool timeout and 3 s of queue wait (the
    deadline: 4.5 s), at most `--in-flight` calls admitted (one burst per value given), after
    8 calls that tell the server the tool's service time. With `--pin` the server runs on core 1 and
    this process, the client, on core 0 (`os.sched_setaffinity`). Reported: client-side latency
    percentiles, from connect to answer, of all answers, of the calls let in (target: p99 within the
    deadline + 1 s) and of the 503s (target: within 1 s), the answers by kind, and how many calls the
    server refused for an expected wait past their queue wait. The client speaks
    raw HTTP/1.1 so that it costs the shared cores little: an HTTP client library's own parsing of a
    thousand answers is timed as the server's latency otherwise. `--baseline-src` runs each part
    (each hostile body size, each burst) against another checkout's server too, just before this code's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import httpx
import numpy as np
import psutil

from served import server_in_subprocess

TIMEOUT_S = 1.5
WARM_UP_CALLS = 8
QUEUE_WAIT_S = 3.0
DEADLINE_S = TIMEOUT_S + QUEUE_WAIT_S

SERVER = """
import os, sys, uvicorn
if sys.argv[2] != "-":
    os.sched_setaffinity(0, {{int(sys.argv[2])}})  # before any thread starts: they inherit it
from spacetools.tools.diagnostics import EchoTool, SleepTool
from spacetools.toolshed import ToolDeployment
from spacetools.toolshed.http import create_app, return_freed_memory, toolshed_for
from spacetools.toolshed.limits import ServerLimits

return_freed_memory()  # as `spacetools serve` does
limits = ServerLimits(max_queue_wait_s={queue_wait}, max_calls_in_flight={in_flight})
deployments = [
    ToolDeployment(tool=EchoTool, backend="inprocess", instances=2),
    ToolDeployment(tool=SleepTool, backend="inprocess", instances=8, timeout_s={timeout}),
]
app = create_app(toolshed_for(deployments, limits), limits)
try:
    from spacetools.toolshed.slow_clients import server_options
    options = server_options(limits)
except ImportError:
    try:  # code from before the read deadlines
        from spacetools.toolshed.admission import server_options
        options = server_options(limits.max_connections)
    except ImportError:  # code from before admission at the door, as the benchmark ran it then
        options = dict(http="h11", backlog=4096)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", **options)
"""


#: The cores of the server and of this process (the client) with `--pin`, each its own.
SERVER_CORE, CLIENT_CORE = 1, 0


@contextlib.contextmanager
def server_process(
    in_flight: int, src: str | None = None, pin: bool = False
) -> Iterator[tuple[str, psutil.Process]]:
    """The server in a subprocess (of the code in `src`, else this one), on `SERVER_CORE` with `pin`;
    yields its base URL and process."""
    code = SERVER.format(queue_wait=QUEUE_WAIT_S, in_flight=in_flight, timeout=TIMEOUT_S)
    env = None if src is None else {**os.environ, "PYTHONPATH": src}
    with server_in_subprocess(code, str(SERVER_CORE) if pin else "-", env=env) as (url, process):
        yield url, psutil.Process(process.pid)


def percentiles_ms(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(samples, [50, 99]) * 1000
    return {"p50": round(float(p50), 1), "p99": round(float(p99), 1), "max": round(max(samples) * 1000, 1)}


def points_body(megabytes: float) -> bytes:
    """A call body of about `megabytes` MB: one echo call whose arguments are a list of 3-D points."""
    count = int(megabytes * 2**20 / 14)
    points = ",".join(["[0.5,0.5,0.5]"] * count)
    return f'[{{"name":"echo.echo","arguments":{{"text":"x","points":[{points}]}}}}]'.encode()


def probe_health(url: str, seconds: float) -> list[float]:
    """`/health` latencies, one probe every 20 ms for `seconds` (its own connection, kept alive)."""
    latencies: list[float] = []
    with httpx.Client(base_url=url, timeout=300) as http:
        http.get("/health")  # connect before timing
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            began = time.perf_counter()
            assert http.get("/health").status_code == 200
            latencies.append(time.perf_counter() - began)
            time.sleep(0.02)
    return latencies


async def hostile(url: str, clients: int, megabytes: float, seconds: float) -> dict[str, Any]:
    body = points_body(megabytes)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        session_id = (await http.post("/sessions", json={"images": []})).json()["id"]
        path = f"/sessions/{session_id}/calls"
        started = time.perf_counter()
        alone = await http.post(path, content=body, headers=headers)
        alone_s = time.perf_counter() - started
        outcomes: Counter[str] = Counter()
        stop = asyncio.Event()

        async def attacker() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=300) as own:
                while not stop.is_set():
                    response = await own.post(path, content=body, headers=headers)
                    outcomes[describe(response.status_code, response.content)] += 1

        attackers = [asyncio.ensure_future(attacker()) for _ in range(clients)]
        # The prober runs in a process of its own: in this one, the attackers' sends would delay it.
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            latencies = await asyncio.get_running_loop().run_in_executor(pool, probe_health, url, seconds)
        stop.set()
        await asyncio.gather(*attackers)
    return {
        "body_mb": round(len(body) / 2**20, 2),
        "alone": {"seconds": round(alone_s, 3), "answer": describe(alone.status_code, alone.content)},
        "health_ms": percentiles_ms(latencies),
        "health_probes": len(latencies),
        "hostile_answers": dict(outcomes),
    }


def describe(status: int, body: bytes) -> str:
    """An answer's kind: the HTTP status, and for a 200 the first words of the result."""
    if status != 200:
        return f"HTTP {status}"
    text = json.loads(body)[0]["text"]
    return "200: " + (text.split(":")[0] if not text.startswith("Error") else " ".join(text.split()[:8]))


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def burst(url: str, server: psutil.Process, requests: int) -> dict[str, Any]:
    """`requests` calls at once, each on its own raw connection, timed from its connect to its answer.

    Raw sockets rather than an HTTP client library: a thousand pure-Python clients would take the
    cores the server needs, and time their own parsing as the server's latency."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        session_id = (await http.post("/sessions", json={"images": []})).json()["id"]
        # A server in service knows its tools' service times: a few calls before the burst.
        for _ in range(WARM_UP_CALLS):
            await http.post(
                f"/sessions/{session_id}/calls",
                json=[{"name": "sleep.sleep", "arguments": {"seconds": 0.05}}],
            )
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps([{"name": "sleep.sleep", "arguments": {"seconds": 0.05}}]).encode()
    request = (
        f"POST /sessions/{session_id}/calls HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    gate = asyncio.Event()

    async def one() -> tuple[str, float]:
        await gate.wait()
        began = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(request)
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                fields = dict(line.lower().split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
                answer = await reader.readexactly(int(fields.get("content-length", "0")))
            finally:
                writer.close()
        except (OSError, asyncio.IncompleteReadError) as exc:
            return type(exc).__name__, time.perf_counter() - began
        latency = time.perf_counter() - began
        status = int(head.split(" ", 2)[1])
        if status == 503:
            return ("HTTP 503" if "retry-after" in fields else "HTTP 503 without Retry-After"), latency
        return describe(status, answer), latency

    tasks = [asyncio.ensure_future(one()) for _ in range(requests)]
    await asyncio.sleep(0.1)
    started, server_cpu_s = time.perf_counter(), cpu_s(server)
    gate.set()
    answers = await asyncio.gather(*tasks)
    elapsed, server_cpu_s = time.perf_counter() - started, cpu_s(server) - server_cpu_s
    latencies = [latency for _kind, latency in answers]
    refused = [latency for kind, latency in answers if kind.startswith("HTTP 503")]
    let_in = [latency for kind, latency in answers if not kind.startswith("HTTP 503")]
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        stats = (await http.get("/stats")).json()
    return {
        "requests": requests,
        "seconds": round(elapsed, 2),
        "server_cpu_s": round(server_cpu_s, 2),
        "deadline_s": DEADLINE_S,
        "latency_ms": percentiles_ms(latencies),
        "let_in_ms": percentiles_ms(let_in),
        "refused_503_ms": percentiles_ms(refused),
        "answers": dict(Counter(kind for kind, _latency in answers)),
        "refused_by_expected_wait": stats.get("calls_refused_by_expected_wait"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostile-clients", type=int, default=2)
    parser.add_argument(
        "--hostile-mb", type=float, nargs="*", default=[0.06, 0.24, 8.0], help="body sizes (none: no part a)"
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument(
        "--in-flight",
        type=int,
        nargs="+",
        default=[1024, 256, 16],
        help="the server's max_calls_in_flight (a burst each)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help=f"bursts with the server on core {SERVER_CORE} and this process (the client) on core {CLIENT_CORE}",
    )
    parser.add_argument(
        "--baseline-src",
        help="another checkout's src: each part also runs against its server, just before this code's",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    report: dict[str, Any] = {"load": os.getloadavg()[0], "cpus": os.cpu_count()}
    for megabytes in args.hostile_mb:
        if args.baseline_src:
            with server_process(args.in_flight[0], args.baseline_src) as (url, _):
                report[f"baseline_hostile_{megabytes:g}mb"] = asyncio.run(
                    hostile(url, args.hostile_clients, megabytes, args.seconds)
                )
        with server_process(args.in_flight[0]) as (url, _):
            report[f"hostile_{megabytes:g}mb"] = asyncio.run(
                hostile(url, args.hostile_clients, megabytes, args.seconds)
            )
    if args.pin:
        os.sched_setaffinity(0, {CLIENT_CORE})
    for in_flight in args.in_flight:
        if args.baseline_src:
            with server_process(in_flight, args.baseline_src, args.pin) as (url, server):
                report[f"baseline_burst_in_flight_{in_flight}"] = asyncio.run(burst(url, server, args.burst))
        with server_process(in_flight, pin=args.pin) as (url, server):
            report[f"burst_in_flight_{in_flight}"] = asyncio.run(burst(url, server, args.burst))
    report["load_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
