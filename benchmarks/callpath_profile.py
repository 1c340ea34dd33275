"""Where a Toolshed call's time goes, and two checkouts of the call path side by side.

Run: `python benchmarks/callpath_profile.py profile [--backend process] [--calls 20000]`: cProfile (thread
CPU time) of `Session.call` on the no-op tool `sleep.noop`, one caller; the top functions.

`python benchmarks/callpath_profile.py compare OLD_SRC NEW_SRC --json`: the same calls measured with
each checkout's `src` (e.g. `git archive main src | tar -x -C /tmp/old`), in child processes that
alternate round by round, so both see the same load: per call, wall and process CPU time in process,
in a worker process and over HTTP (the Toolshed's `/calls` less a bare FastAPI echo, as
`toolshed_scaleout.py` measures it); ratios new/old are medians of each round's ratio. Also the Python
bytecodes the server executes per call (all its threads; over HTTP, the server's less the bare echo's),
which no load changes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import functools
import json
import os
import pstats
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BACKENDS = ("inprocess", "process")
NOOP_BODY = [{"name": "sleep.noop", "arguments": {}}]


def _shed(backend: str) -> Any:
    from spacetools.tools.diagnostics import SleepTool
    from spacetools.toolshed import ToolDeployment, Toolshed

    return Toolshed([ToolDeployment(tool=SleepTool, backend=backend)])


async def _timed(call: Callable[[], Awaitable[Any]], calls: int) -> tuple[float, float]:
    """Wall and process CPU µs per call."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        await call()
    return (time.perf_counter() - wall) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6


class _Bytecodes:
    """Counts the bytecodes every thread executes while `on` (threads started after `install`)."""

    def __init__(self) -> None:
        self.on = False
        self.counts: collections.Counter[str] = collections.Counter()

    def install(self) -> None:
        threading.settrace(self._trace)
        sys.settrace(self._trace)

    def _trace(self, frame: Any, event: str, _arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode" and self.on:
            self.counts[threading.current_thread().name] += 1
        return self._trace


@contextlib.contextmanager
def _http_servers(shed: Any) -> Iterator[tuple[str, str]]:
    """The Toolshed's app and a bare FastAPI echo, each served by uvicorn on a thread of this process."""
    import uvicorn
    from fastapi import Body, FastAPI

    from spacetools.toolshed.http import create_app
    from spacetools.toolshed.limits import ServerLimits

    bare = FastAPI()

    @bare.post("/echo")
    async def echo(body: Any = Body()) -> Any:
        return body

    servers = []
    urls = []
    for name, app in (("bare", bare), ("shed", create_app(shed, ServerLimits()))):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, name=f"http-{name}", daemon=True).start()
        servers.append(server)
        urls.append(f"http://127.0.0.1:{port}")
    while not all(server.started for server in servers):
        time.sleep(0.05)
    try:
        yield urls[0], urls[1]
    finally:
        for server in servers:
            server.should_exit = True


async def _times(calls: int) -> dict[str, Any]:
    """One round with this process's `spacetools`: wall and CPU µs per call of each path (HTTP: the
    servers in processes of their own, as `toolshed_scaleout.py` runs them)."""
    from served import server_in_subprocess
    from toolshed_scaleout import BARE_FASTAPI, TOOLSHED_HTTP

    out: dict[str, Any] = {}
    for backend in BACKENDS:
        async with _shed(backend) as shed:
            call = functools.partial(shed.open_session([]).call, "sleep.noop")
            await _timed(call, 100)  # warm-up
            wall, cpu = await _timed(call, calls)
            out[backend] = {"wall_us": round(wall, 1), "cpu_us": round(cpu, 1)}
    with contextlib.ExitStack() as servers:
        bare_url, _ = servers.enter_context(server_in_subprocess(BARE_FASTAPI))
        shed_url, _ = servers.enter_context(server_in_subprocess(TOOLSHED_HTTP))
        walls = await _http_walls(bare_url, shed_url, calls // 4)
    out["http"] = {"added_wall_us": round(walls["shed"] - walls["bare"], 1)}
    return out


async def _http_walls(
    bare_url: str, shed_url: str, calls: int, counter: _Bytecodes | None = None
) -> dict[str, float]:
    """Wall µs per call of the bare echo and of the Toolshed's `/calls` (or, with `counter`, the
    bytecodes the server threads execute per call)."""
    import httpx

    async with httpx.AsyncClient(timeout=600) as client:
        session_id = (await client.post(f"{shed_url}/sessions", json={"images": []})).json()["id"]
        urls = {"bare": f"{bare_url}/echo", "shed": f"{shed_url}/sessions/{session_id}/calls"}
        out = {}
        for name, url in urls.items():

            async def post(url: str = url) -> None:
                (await client.post(url, json=NOOP_BODY)).raise_for_status()

            await _timed(post, 50)
            if counter is None:
                out[name] = (await _timed(post, calls))[0]
                continue
            counter.on = True
            await _timed(post, calls)
            counter.on = False
            served = sum(count for thread, count in counter.counts.items() if thread != "MainThread")
            out[name] = served / calls
            counter.counts.clear()
    return out


async def _bytecodes(calls: int) -> dict[str, Any]:
    """Bytecodes per call of each path, counted in this process (HTTP: both servers on threads here)."""
    counter = _Bytecodes()
    counter.install()
    out: dict[str, Any] = {}
    for backend in BACKENDS:
        async with _shed(backend) as shed:
            call = functools.partial(shed.open_session([]).call, "sleep.noop")
            await _timed(call, 50)
            counter.on = True
            await _timed(call, calls)
            counter.on = False
            out[backend] = round(sum(counter.counts.values()) / calls)
            counter.counts.clear()
    with _http_servers(_shed("inprocess")) as (bare_url, shed_url):
        counts = await _http_walls(bare_url, shed_url, calls // 4, counter)
    out["http_added"] = round(counts["shed"] - counts["bare"])
    return out


def _child(src: str, mode: str, calls: int) -> dict[str, Any]:
    """One measuring child with `src` first on the path."""
    env = dict(os.environ, PYTHONPATH=src, RAY_AUTH_MODE="disabled")
    command = [sys.executable, __file__, "measure", mode, "--calls", str(calls)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def _compare(old: str, new: str, rounds: int, calls: int, bytecode_calls: int) -> dict[str, Any]:
    load = round(os.getloadavg()[0], 2)
    checkouts = {"old": old, "new": new}
    bytecodes = {name: _child(src, "bytecodes", bytecode_calls) for name, src in checkouts.items()}
    samples: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for index in range(rounds):
        for name in ("old", "new") if index % 2 == 0 else ("new", "old"):
            samples[name].append(_child(checkouts[name], "times", calls))

    def figure(path: str, key: str) -> dict[str, Any]:
        old_values = [sample[path][key] for sample in samples["old"]]
        new_values = [sample[path][key] for sample in samples["new"]]
        ratios = [mine / theirs for mine, theirs in zip(new_values, old_values, strict=True)]
        return {
            "old": round(statistics.median(old_values), 1),
            "new": round(statistics.median(new_values), 1),
            "new_over_old": round(statistics.median(ratios), 3),
            "new_over_old_per_round": [round(ratio, 3) for ratio in ratios],
        }

    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_1min_before": load,
        "load_1min_after": round(os.getloadavg()[0], 2),
        "rounds": rounds,
        "calls_per_round": calls,
        "wall_us": {backend: figure(backend, "wall_us") for backend in BACKENDS}
        | {"http_added": figure("http", "added_wall_us")},
        "cpu_us": {backend: figure(backend, "cpu_us") for backend in BACKENDS},
        "bytecodes_per_call": {
            path: {
                "old": bytecodes["old"][path],
                "new": bytecodes["new"][path],
                "new_over_old": round(bytecodes["new"][path] / bytecodes["old"][path], 3),
            }
            for path in bytecodes["new"]
        },
    }


async def _profile(backend: str, calls: int, top: int) -> None:
    async with _shed(backend) as shed:
        session = shed.open_session([])
        await _timed(lambda: session.call("sleep.noop"), 100)
        profiler = cProfile.Profile(time.thread_time)  # CPU time: waits for the instance do not count
        profiler.enable()
        await _timed(lambda: session.call("sleep.noop"), calls)
        profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":  # the guard also keeps worker processes from re-running the benchmark
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    profile = commands.add_parser("profile", help="cProfile of the calls")
    profile.add_argument("--backend", choices=BACKENDS, default="inprocess")
    profile.add_argument("--calls", type=int, default=20_000)
    profile.add_argument("--top", type=int, default=40)
    compare = commands.add_parser("compare", help="two checkouts' src, alternating")
    compare.add_argument("old", type=Path)
    compare.add_argument("new", type=Path)
    compare.add_argument("--rounds", type=int, default=9)
    compare.add_argument("--calls", type=int, default=2000)
    compare.add_argument("--bytecode-calls", type=int, default=400)
    compare.add_argument("--json", action="store_true", help="print one JSON object (the only output)")
    measure = commands.add_parser("measure", help="one child of compare")
    measure.add_argument("mode", choices=("times", "bytecodes"))
    measure.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if args.command == "profile":
        asyncio.run(_profile(args.backend, args.calls, args.top))
    elif args.command == "measure":
        measured = _times(args.calls) if args.mode == "times" else _bytecodes(args.calls)
        print(json.dumps(asyncio.run(measured)))
    else:
        report = _compare(
            str(args.old.resolve()), str(args.new.resolve()), args.rounds, args.calls, args.bytecode_calls
        )
        print(json.dumps(report) if args.json else json.dumps(report, indent=2))
