"""Toolshed scale-out: per-call overhead against bare anchors, the paper's pool scenario, batching, autoscaling.

Run: `RAY_AUTH_MODE=disabled python benchmarks/toolshed_scaleout.py --json` (one JSON object on stdout).
(a) overhead per call of a no-op tool, one caller, in rounds that alternate so that every figure sees
    the same load: the Toolshed in-process (an async method on the event loop, and a plain one on the
    instance's thread against a bare thread round trip), in a worker process and on Ray against a bare
    Ray actor call (with no argument, and with one like the Toolshed's), and the Toolshed's HTTP
    endpoint against a bare FastAPI echo endpoint (both servers on 127.0.0.1 in processes of their own,
    as `spacetools serve` runs); medians over the rounds;
(b) the paper's scenario: 8 concurrent calls to a 1 s pointing tool on 1 instance against 3 instances,
    on each backend (the paper: 8.5 s on one HTTP instance, 2.7 s on three);
(c) throughput of a tiny transformers model tool under 16 callers, batches of 8 against unbatched;
(d) autoscaling: a load step from 1 to 32 callers on a 100 ms tool; time until the pool has grown,
    and latency before, just after and once grown; on Ray also with a warm standby actor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import queue
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from served import server_in_subprocess
from spacetools.kit.definition import Tool, ToolContext, ToolResult, tool_method
from spacetools.tools.diagnostics import SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.backends.ray import connect

BACKENDS = ("inprocess", "process", "ray")
RAY_SHARE = {"num_cpus": 0.1}


def _deployment(backend: str, **fields: Any) -> ToolDeployment:
    return ToolDeployment(backend=backend, **fields, **(RAY_SHARE if backend == "ray" else {}))


#: A bare FastAPI app with one JSON echo endpoint: the floor of any HTTP tool server.
BARE_FASTAPI = """
import sys, uvicorn
from typing import Any
from fastapi import Body, FastAPI

app = FastAPI()

@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}

@app.post("/echo")
async def echo(body: Any = Body()) -> Any:
    return body

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
#: The Toolshed's app serving the no-op tool in process, as `spacetools serve` builds it.
TOOLSHED_HTTP = """
import sys, uvicorn
from spacetools.tools.diagnostics import SleepTool
from spacetools.toolshed import ToolDeployment
from spacetools.toolshed.http import create_app, return_freed_memory, toolshed_for
from spacetools.toolshed.limits import ServerLimits

return_freed_memory()
limits = ServerLimits()
app = create_app(toolshed_for([ToolDeployment(tool=SleepTool, backend="inprocess")], limits), limits)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
NOOP_BODY = [{"name": "sleep.noop", "arguments": {}}]


class _BareSleepTool(SleepTool):
    """The no-op tool as a bare Ray actor (a subclass: ray.remote rewrites the methods of the class it
    is given, in place)."""

    def take(self, call: Any) -> ToolResult:
        return self.noop()


async def _per_call_us(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await call()
    return (time.perf_counter() - started) / calls * 1e6


def bare_thread_round_trip() -> tuple[Callable[[], Awaitable[None]], Callable[[], None]]:
    """The floor of a call on an instance's thread: a future put on a queue that a daemon thread serves,
    settled from there with `call_soon_threadsafe`, awaited. Returns the call and how to stop the thread."""
    loop = asyncio.get_running_loop()
    requests: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

    def serve() -> None:
        while (future := requests.get()) is not None:
            loop.call_soon_threadsafe(future.set_result, None)

    threading.Thread(target=serve, name="bare-thread", daemon=True).start()

    async def call() -> None:
        future: asyncio.Future[None] = loop.create_future()
        requests.put(future)
        await future

    return call, functools.partial(requests.put, None)


async def _overhead(rounds: int, calls: int) -> dict[str, Any]:
    """Median µs per no-op call of each path; the paths take turns within every round."""
    import httpx
    import ray

    sheds = [Toolshed([_deployment(backend, tool=SleepTool)]) for backend in BACKENDS]
    with contextlib.ExitStack() as servers:
        bare_url, _ = servers.enter_context(server_in_subprocess(BARE_FASTAPI))
        shed_url, _ = servers.enter_context(server_in_subprocess(TOOLSHED_HTTP))
        for shed in sheds:
            await shed.start()
        actor = ray.remote(_BareSleepTool).options(**RAY_SHARE).remote()
        async with httpx.AsyncClient() as client:
            response = await client.post(f"{shed_url}/sessions", json={"images": []})
            calls_url = f"{shed_url}/sessions/{response.json()['id']}/calls"

            async def http_call(url: str) -> None:
                response = await client.post(url, json=NOOP_BODY)
                response.raise_for_status()

            paths: dict[str, Callable[[], Awaitable[Any]]] = {
                backend: functools.partial(shed.open_session([]).call, "sleep.noop")
                for backend, shed in zip(BACKENDS, sheds, strict=True)
            }
            # An async method runs on the event loop; a plain one (above) on the instance's thread.
            paths["inprocess_async"] = functools.partial(sheds[0].open_session([]).call, "sleep.noop_async")
            paths["bare_thread_round_trip"], stop_thread = bare_thread_round_trip()
            paths["bare_ray_actor"] = lambda: actor.noop.remote()
            # The floor of a call that carries its arguments: the same no-op with one argument as big
            # as the Toolshed's (a call number, the method, the arguments, the context: session id,
            # images, seed, and the session's part, sent once per session).
            call = (1, "sleep.noop", {}, ("0" * 32, {}, 2**63, None))
            paths["bare_ray_actor_one_argument"] = lambda: actor.take.remote(call)
            paths["toolshed_http"] = functools.partial(http_call, calls_url)
            paths["bare_fastapi"] = functools.partial(http_call, f"{bare_url}/echo")
            samples: dict[str, list[float]] = {name: [] for name in paths}
            for path in paths.values():  # warm-up
                await _per_call_us(path, 50)
            for _ in range(rounds):
                for name, path in paths.items():
                    samples[name].append(await _per_call_us(path, calls))
            stop_thread()
        ray.kill(actor)
        for shed in sheds:
            await shed.close()

    def per_round(path: str, anchor: str) -> list[float]:
        return [round(mine / bare, 3) for mine, bare in zip(samples[path], samples[anchor], strict=True)]

    # Ratios are medians of the rounds' own ratios: each round measures a path and its anchor side by side.
    ray_rounds = per_round("ray", "bare_ray_actor")
    http_added = [
        mine - bare for mine, bare in zip(samples["toolshed_http"], samples["bare_fastapi"], strict=True)
    ]
    return {
        "rounds": rounds,
        "calls_per_round": calls,
        "per_call_us": {name: round(statistics.median(values), 1) for name, values in samples.items()},
        "inprocess_over_bare_thread": round(
            statistics.median(per_round("inprocess", "bare_thread_round_trip")), 3
        ),
        "ray_over_bare_actor": round(statistics.median(ray_rounds), 3),
        "ray_over_bare_actor_per_round": ray_rounds,
        "ray_over_bare_actor_one_argument": round(
            statistics.median(per_round("ray", "bare_ray_actor_one_argument")), 3
        ),
        "http_added_over_bare_fastapi_us": round(statistics.median(http_added), 1),
        "http_over_bare_fastapi": round(statistics.median(per_round("toolshed_http", "bare_fastapi")), 3),
    }


async def _paper_scenario(backend: str, instances: int) -> float:
    async with Toolshed([_deployment(backend, tool=SleepTool, instances=instances)]) as shed:
        sessions = [shed.open_session([], seed=caller) for caller in range(8)]
        started = time.perf_counter()
        results = await asyncio.gather(*(s.call("sleep.sleep", {"seconds": 1.0}) for s in sessions))
        elapsed = time.perf_counter() - started
    assert all(not r.is_error for r in results)
    return round(elapsed, 2)


class TinyEncoderTool(Tool):
    """A randomly initialised 2-layer BERT encoder scoring texts: the shape of a batched model tool."""

    name = "encoder"

    def setup(self) -> None:
        import torch
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        torch.set_num_threads(1)
        config = BertConfig(
            vocab_size=512,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
        )
        self.model = BertModel(config).eval()

    @tool_method
    def score(self, text: str) -> ToolResult:
        """Score a text with the encoder.

        Args:
            text: The text to score.
        """
        return self.batch_score([{"text": text}], [])[0]

    def batch_score(self, calls: list[dict[str, Any]], contexts: list[ToolContext]) -> list[ToolResult]:
        import torch

        ids = [[ord(char) % 512 for char in call["text"][:32]] for call in calls]
        width = max(len(row) for row in ids)
        tokens = torch.tensor([row + [0] * (width - len(row)) for row in ids])
        mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])
        with torch.inference_mode():
            pooled = self.model(input_ids=tokens, attention_mask=mask).pooler_output
        return [ToolResult(text=f"score {float(row.norm()):.4f}") for row in pooled]


async def _batching_round(
    shed: Toolshed, calls_per_caller: int, callers: int = 16
) -> tuple[float, list[str]]:
    """Calls per second of 16 callers on one encoder instance, and the first caller's results."""
    sessions = [shed.open_session([], seed=caller) for caller in range(callers)]
    texts = [f"the red mug left of the tray, number {index}" for index in range(callers)]

    async def caller(index: int) -> list[str]:
        out = []
        for _ in range(calls_per_caller):
            result = await sessions[index].call("encoder.score", {"text": texts[index]})
            assert not result.is_error, result.text
            out.append(result.text)
        return out

    started = time.perf_counter()
    outputs = await asyncio.gather(*(caller(index) for index in range(callers)))
    return callers * calls_per_caller / (time.perf_counter() - started), outputs[0]


async def _batching(calls_per_caller: int, rounds: int) -> dict[str, Any]:
    """Unbatched and batch-8 rounds alternate, so that both see the same machine load."""
    sheds = {
        size: Toolshed(
            [ToolDeployment(tool=TinyEncoderTool, backend="inprocess", batch_size=size, batch_window_ms=2.0)]
        )
        for size in (1, 8)
    }
    rates: dict[int, list[float]] = {1: [], 8: []}
    answers: dict[int, list[str]] = {}
    for shed in sheds.values():
        await shed.start()
        await _batching_round(shed, 1)  # warm-up
    batching_before = sheds[8].stats()["tools"]["encoder"]["batching"][0]
    for _ in range(rounds):
        for size, shed in sheds.items():
            rate, answers[size] = await _batching_round(shed, calls_per_caller)
            rates[size].append(rate)
    batching = sheds[8].stats()["tools"]["encoder"]["batching"][0]
    for shed in sheds.values():
        await shed.close()
    assert answers[1] == answers[8]  # the same answers, batched or not
    ratios = [batched / single for single, batched in zip(rates[1], rates[8], strict=True)]
    return {
        "unbatched_calls_per_s": round(statistics.median(rates[1]), 1),
        "batch8_calls_per_s": round(statistics.median(rates[8]), 1),
        "batch8_mean_batch": round(
            (batching["calls"] - batching_before["calls"])
            / (batching["batches"] - batching_before["batches"]),
            2,
        ),
        "speedup_per_round": [round(ratio, 2) for ratio in ratios],
        "speedup_median": round(statistics.median(ratios), 2),
    }


async def _autoscale_step(
    backend: str, maximum: int, standby: int, before_s: float, after_s: float
) -> dict[str, Any]:
    latency = 0.1
    deployment = _deployment(
        backend,
        tool=SleepTool,
        instances=1,
        max_instances=maximum,
        target_queue_wait_ms=100,
        standby_instances=standby,
    )
    async with Toolshed([deployment]) as shed:
        samples: list[tuple[float, float]] = []  # (finished at, latency)
        step_at = 0.0

        async def caller(index: int, until: float) -> None:
            session = shed.open_session([], seed=index)
            while time.perf_counter() < until:
                started = time.perf_counter()
                result = await session.call("sleep.sleep", {"seconds": latency})
                assert not result.is_error, result.text
                samples.append((time.perf_counter(), time.perf_counter() - started))

        ready_by = time.perf_counter() + 120
        while len(shed.router("sleep").standby) < standby:  # the step starts once the standby is up
            assert time.perf_counter() < ready_by, "the standby instance did not start"
            await asyncio.sleep(0.05)
        begin = time.perf_counter()
        step_at = begin + before_s
        end = step_at + after_s
        grown_at: float | None = None
        first_added_at: float | None = None

        async def watch() -> None:
            nonlocal grown_at, first_added_at
            while grown_at is None and time.perf_counter() < end:
                instances = shed.stats()["tools"]["sleep"]["instances"]
                if instances > 1 and first_added_at is None:
                    first_added_at = time.perf_counter()
                if instances >= maximum:
                    grown_at = time.perf_counter()
                await asyncio.sleep(0.02)

        async def step() -> None:
            await asyncio.sleep(before_s)
            await asyncio.gather(*(caller(index, end) for index in range(1, 32)), watch())

        await asyncio.gather(caller(0, end), step())
        events = shed.stats()["tools"]["sleep"]["autoscale"]["events"]

    def p50_ms(start: float, stop: float) -> float | None:
        window = [lat for at, lat in samples if start <= at < stop]
        return round(statistics.median(window) * 1000, 1) if window else None

    return {
        "tool_latency_ms": latency * 1000,
        "max_instances": maximum,
        "standby_instances": standby,
        "first_instance_added_after_s": round(first_added_at - step_at, 2) if first_added_at else None,
        "grown_after_s": round(grown_at - step_at, 2) if grown_at is not None else None,
        "p50_before_ms": p50_ms(begin, step_at),
        "p50_first_second_after_ms": p50_ms(step_at, step_at + 1.0),
        "p50_last_second_ms": p50_ms(end - 1.0, end),
        "scale_events": [f"{e['from']}→{e['to']}: {e['reason']}" for e in events],
    }


async def main(quick: bool) -> dict[str, Any]:
    load = round(os.getloadavg()[0], 2)
    overhead = await _overhead(rounds=3 if quick else 9, calls=50 if quick else 200)
    paper = {
        backend: {"1_instance_s": await _paper_scenario(backend, 1), "3_instances_s": None}
        for backend in BACKENDS
    }
    for backend in BACKENDS:
        paper[backend]["3_instances_s"] = await _paper_scenario(backend, 3)
    # Rounds of a fraction of a second swing ±30% on a shared host: enough calls and rounds for a median.
    calls = 4 if quick else 40
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_1min": load,
        "overhead": overhead,
        "paper_8_calls_1s_tool": paper,
        "batching": await _batching(calls, rounds=1 if quick else 5),
        "autoscale": {
            # Ray starts at most as many worker processes at once as the node has CPUs: a longer window.
            name: await _autoscale_step(backend, maximum, standby, before_s=2.0, after_s=after_s)
            for name, backend, maximum, standby, after_s in (
                ("process", "process", 16, 0, 6.0),
                ("ray", "ray", 4, 0, 20.0),
                ("ray_standby", "ray", 4, 1, 20.0),
            )
        },
    }


if __name__ == "__main__":  # the guard also keeps worker processes from re-running the benchmark
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, for a smoke run")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    connect(None)
    report = asyncio.run(main(args.quick))
    print(
        json.dumps(report, ensure_ascii=False)
        if args.json
        else json.dumps(report, indent=2, ensure_ascii=False)
    )
