"""Where a Toolshed call's time goes, and two checkouts of the call path side by side.

Run: `python benchmarks/callpath_profile.py profile [--backend process] [--calls 20000]`: cProfile (thread
CPU time) of `Session.call` on the no-op tool `sleep.noop`, one caller; the top functions.

`python benchmarks/callpath_profile.py compare OLD_SRC NEW_SRC --json`: the same calls measured with
each checkout's `src` (e.g. `git archive main src | tar -x -C /tmp/old`) by two child processes, kept
up, that take turns in short bursts, so both see the same load: per call, wall and process CPU time in
process, in a worker process and over HTTP (the Toolshed's `/calls` and a bare FastAPI echo, as
`toolshed_scaleout.py` measures them) and, with `--ray`, on the Ray backend and a bare Ray actor (in
one local cluster); ratios new/old are medians of the rounds' ratios. Also the
Python bytecodes the server executes per call (all its threads; over HTTP, the Toolshed's server less
the bare echo's), which no load changes.
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

    share = {"num_cpus": 0.1} if backend == "ray" else {}
    return Toolshed([ToolDeployment(tool=SleepTool, backend=backend, **share)])


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


#: The paths a timing child measures, and the share of a burst's calls each makes (HTTP calls are slower).
TIMED_PATHS = {"inprocess": 1.0, "process": 1.0, "http_bare": 0.25, "http_shed": 0.25}
#: With `--ray`: the Ray backend and a bare Ray actor's no-op, in a Ray cluster the parent starts.
RAY_PATHS = {"ray": 0.1, "ray_bare": 0.1}


class _BareNoop:
    """The no-op as a bare Ray actor method."""

    def noop(self) -> str:
        return "ok"


async def _serve_bursts(with_ray: bool) -> None:
    """A timing child: with its paths set up once, answer each line "<path> <calls>" from the parent
    with one JSON line of wall and process CPU µs per call (HTTP: the servers in processes of their own,
    as `toolshed_scaleout.py` runs them)."""
    import httpx

    from served import server_in_subprocess
    from toolshed_scaleout import BARE_FASTAPI, TOOLSHED_HTTP

    if with_ray:
        import ray

        # This job's actors run this checkout: Ray's workers take the cluster's environment, not ours.
        ray.init(runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}}, log_to_driver=False)
    async with contextlib.AsyncExitStack() as stack:
        paths: dict[str, Callable[[], Awaitable[Any]]] = {}
        for backend in (*BACKENDS, "ray") if with_ray else BACKENDS:
            shed = await stack.enter_async_context(_shed(backend))
            call = functools.partial(shed.open_session([]).call, "sleep.noop")
            result = await call()
            assert not result.is_error, result.text  # a no-op that fails would time the failure
            paths[backend] = call
        if with_ray:
            actor = ray.remote(_BareNoop).options(num_cpus=0.1).remote()
            paths["ray_bare"] = lambda: actor.noop.remote()
        bare_url, _ = stack.enter_context(server_in_subprocess(BARE_FASTAPI))
        shed_url, _ = stack.enter_context(server_in_subprocess(TOOLSHED_HTTP))
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=600))
        session_id = (await client.post(f"{shed_url}/sessions", json={"images": []})).json()["id"]
        for name, url in (
            ("http_bare", f"{bare_url}/echo"),
            ("http_shed", f"{shed_url}/sessions/{session_id}/calls"),
        ):

            async def post(url: str = url) -> None:
                (await client.post(url, json=NOOP_BODY)).raise_for_status()

            paths[name] = post
        for path in paths.values():
            await _timed(path, 50)  # warm-up
        print("ready", flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            name, calls = line.split()
            wall, cpu = await _timed(paths[name], int(calls))
            print(json.dumps({"wall_us": wall, "cpu_us": cpu}), flush=True)


async def _http_bytecodes(bare_url: str, shed_url: str, calls: int, counter: _Bytecodes) -> dict[str, float]:
    """The bytecodes the server threads execute per call of the bare echo and of the Toolshed's `/calls`."""
    import httpx

    async with httpx.AsyncClient(timeout=600) as client:
        session_id = (await client.post(f"{shed_url}/sessions", json={"images": []})).json()["id"]
        urls = {"bare": f"{bare_url}/echo", "shed": f"{shed_url}/sessions/{session_id}/calls"}
        out = {}
        for name, url in urls.items():

            async def post(url: str = url) -> None:
                (await client.post(url, json=NOOP_BODY)).raise_for_status()

            await _timed(post, 50)
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
        counts = await _http_bytecodes(bare_url, shed_url, calls // 4, counter)
    out["http_added"] = round(counts["shed"] - counts["bare"])
    return out


def _bytecodes_child(src: str, calls: int) -> dict[str, Any]:
    """The bytecodes per call of each path, counted in a child with `src` first on the path."""
    env = dict(os.environ, PYTHONPATH=src, RAY_AUTH_MODE="disabled")
    command = [sys.executable, __file__, "measure", "bytecodes", "--calls", str(calls)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


class _TimingChild:
    """A child timing bursts of calls with one checkout's `src`, kept up between bursts."""

    def __init__(self, src: str, ray_address: str | None) -> None:
        env = dict(os.environ, PYTHONPATH=src, RAY_AUTH_MODE="disabled")
        command = [sys.executable, __file__, "measure", "times"]
        if ray_address is not None:
            env["RAY_ADDRESS"] = ray_address
            command.append("--ray")
        self._process = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._line()  # "ready"

    def burst(self, path: str, calls: int) -> dict[str, float]:
        assert self._process.stdin is not None
        self._process.stdin.write(f"{path} {calls}\n")
        self._process.stdin.flush()
        return dict(json.loads(self._line()))

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=120)

    def _line(self) -> str:
        assert self._process.stdout is not None
        while True:  # the servers it starts may write lines of their own
            line = self._process.stdout.readline()
            if not line:
                raise RuntimeError("the timing child exited")
            if line.startswith(("{", "ready")):
                return line


def _compare(
    old: str, new: str, rounds: int, calls: int, bytecode_calls: int, with_ray: bool
) -> dict[str, Any]:
    load = round(os.getloadavg()[0], 2)
    checkouts = {"old": old, "new": new}
    bytecodes = {name: _bytecodes_child(src, bytecode_calls) for name, src in checkouts.items()}
    ray_address = None
    if with_ray:  # one local cluster for both children (each its own job, with its own `src`)
        import ray

        ray.init(include_dashboard=False, log_to_driver=False)
        ray_address = ray.get_runtime_context().gcs_address
    timed = TIMED_PATHS | (RAY_PATHS if with_ray else {})
    children = {name: _TimingChild(src, ray_address) for name, src in checkouts.items()}
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {path: [] for path in timed} for name in checkouts
    }
    for index in range(rounds):  # bursts alternate, first one checkout then the other
        for path, share in timed.items():
            for name in ("old", "new") if index % 2 == 0 else ("new", "old"):
                samples[name][path].append(children[name].burst(path, max(1, round(calls * share))))
    for child in children.values():
        child.close()

    def figure(values: dict[str, list[float]]) -> dict[str, Any]:
        ratios = [mine / theirs for mine, theirs in zip(values["new"], values["old"], strict=True)]
        return {
            "old": round(statistics.median(values["old"]), 1),
            "new": round(statistics.median(values["new"]), 1),
            "new_over_old": round(statistics.median(ratios), 3),
        }

    def measured(path: str, key: str) -> dict[str, list[float]]:
        return {name: [sample[key] for sample in samples[name][path]] for name in checkouts}

    def ray_ratios() -> dict[str, float]:
        """Per checkout, the median of the rounds' Ray backend over bare actor; and new over old."""
        ratios = {
            name: statistics.median(
                mine["wall_us"] / bare["wall_us"]
                for mine, bare in zip(samples[name]["ray"], samples[name]["ray_bare"], strict=True)
            )
            for name in checkouts
        }
        return {
            **{name: round(ratio, 3) for name, ratio in ratios.items()},
            "new_over_old": round(ratios["new"] / ratios["old"], 3),
        }

    added = {
        name: [
            shed["wall_us"] - bare["wall_us"]
            for shed, bare in zip(samples[name]["http_shed"], samples[name]["http_bare"], strict=True)
        ]
        for name in checkouts
    }
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_1min_before": load,
        "load_1min_after": round(os.getloadavg()[0], 2),
        "rounds": rounds,
        "calls_per_burst": {path: max(1, round(calls * share)) for path, share in timed.items()},
        "wall_us": {path: figure(measured(path, "wall_us")) for path in timed},
        # The HTTP figure is a difference of two noisy ones: its ratio is of the medians.
        "http_added_wall_us": {
            "old": round(statistics.median(added["old"]), 1),
            "new": round(statistics.median(added["new"]), 1),
            "new_over_old": round(statistics.median(added["new"]) / statistics.median(added["old"]), 3),
        },
        "cpu_us": {path: figure(measured(path, "cpu_us")) for path in BACKENDS},
        **({"ray_over_bare_actor": ray_ratios()} if with_ray else {}),
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
    compare.add_argument("--rounds", type=int, default=40)
    compare.add_argument("--calls", type=int, default=300, help="calls per burst (HTTP: a quarter)")
    compare.add_argument("--bytecode-calls", type=int, default=400)
    compare.add_argument("--ray", action="store_true", help="also the Ray backend against a bare actor")
    compare.add_argument("--json", action="store_true", help="print one JSON object (the only output)")
    measure = commands.add_parser("measure", help="one child of compare")
    measure.add_argument("mode", choices=("times", "bytecodes"))
    measure.add_argument("--calls", type=int, default=400, help="bytecodes: calls counted")
    measure.add_argument("--ray", action="store_true", help="times: also Ray (RAY_ADDRESS: the cluster)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if args.command == "profile":
        asyncio.run(_profile(args.backend, args.calls, args.top))
    elif args.command == "measure":
        if args.mode == "times":
            asyncio.run(_serve_bursts(args.ray))
        else:
            print(json.dumps(asyncio.run(_bytecodes(args.calls))))
    else:
        report = _compare(
            str(args.old.resolve()),
            str(args.new.resolve()),
            args.rounds,
            args.calls,
            args.bytecode_calls,
            args.ray,
        )
        print(json.dumps(report) if args.json else json.dumps(report, indent=2))
