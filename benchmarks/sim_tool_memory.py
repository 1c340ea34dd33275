"""Simulated tools on maximal images: memory of a Toolshed server (server + worker processes).

Each of `--sessions` sessions opens with its own scene (seed = session number) on a flat 4096x4096 PNG
(exactly the default `--max-image-pixels`), calls `roborefer.detect_one` and `sam2.segment_from_point`
and closes. The server runs in its own process (uvicorn, as `spacetools serve` runs it) with the two
tools in worker processes. Reported: worker CPU seconds per session, the tree's RSS (server and
workers) at start, its peak while sessions run and after the last one closed, and whether that stays
within the stated bound: the idle RSS plus `RSS_SLACK` (sessions are closed, so the caches hold nothing).

    python benchmarks/sim_tool_memory.py --json [--sessions 20] [--max-render-pixels N] [--cache-mb N]

Without the two settings the tools run with their defaults and the server gets no settings at all, so
the script also measures a checkout from before the settings existed (put its `src` first on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import httpx
import numpy as np
import psutil

from served import server_in_subprocess
from spacetools.kit import imagecodec
from spacetools.sim.layout import build_scene

SIDE = 4096
RSS_SLACK = 768 * 2**20
"""Growth allowed after every session closed: allocator and interpreter retention, two workers and a server."""

SERVER = """
import sys, json, uvicorn
from spacetools.toolshed import ToolDeployment
from spacetools.toolshed.slow_clients import server_options
from spacetools.toolshed.http import create_app, return_freed_memory, toolshed_for
from spacetools.toolshed.limits import ServerLimits

return_freed_memory()  # as `spacetools serve` does
config = json.loads(sys.argv[2])
limits = ServerLimits(max_queue_wait_s=600)
deployments = [
    ToolDeployment(tool=tool, backend="process", instances=1, timeout_s=600, config=config)
    for tool in ("spacetools.tools.pointing:RoboReferTool", "spacetools.tools.segmentation:Sam2Tool")
]
app = create_app(toolshed_for(deployments, limits), limits)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            **server_options(limits))
"""


@contextlib.contextmanager
def server_process(config: dict[str, Any]) -> Iterator[tuple[str, psutil.Process]]:
    """The server in a subprocess; yields its base URL and process."""
    with server_in_subprocess(SERVER, json.dumps(config), startup_s=300) as (url, process):
        yield url, psutil.Process(process.pid)


def tree(process: psutil.Process) -> list[psutil.Process]:
    """The server and its worker processes."""
    return [process, *process.children(recursive=True)]


def tree_rss(process: psutil.Process) -> int:
    """Resident bytes of the server and its workers."""
    total = 0
    for member in tree(process):
        with contextlib.suppress(psutil.Error):
            total += member.memory_info().rss
    return total


def tree_cpu_s(process: psutil.Process) -> float:
    """CPU seconds (user + system) the server and its workers used so far."""
    total = 0.0
    for member in tree(process):
        with contextlib.suppress(psutil.Error):
            times = member.cpu_times()
            total += times.user + times.system
    return total


class PeakSampler:
    """Samples the tree's RSS every 50 ms in a thread; `peak` is the largest seen."""

    def __init__(self, process: psutil.Process) -> None:
        self._process, self.peak, self._stop = process, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self._process))
            time.sleep(0.05)


def run_session(http: httpx.Client, image_url: str, seed: int) -> None:
    """Open a session on scene `seed`, point at an object, segment it, close the session."""
    with build_scene(seed) as scene:
        spec = scene.spec
    opened = http.post(
        "/sessions", json={"images": [image_url], "attachments": [{"scene": spec.model_dump_json()}]}
    )
    opened.raise_for_status()
    session = opened.json()["id"]
    calls = [
        {"name": "roborefer.detect_one", "arguments": {"obj_name": spec.objects[0].name, "image_index": 0}}
    ]
    answer = http.post(f"/sessions/{session}/calls", json=calls).json()[0]
    x, y = answer["value"]["points"][0] if answer["value"]["points"] else (0.5, 0.5)
    calls = [{"name": "sam2.segment_from_point", "arguments": {"x": x, "y": y, "image_index": 0}}]
    answer = http.post(f"/sessions/{session}/calls", json=calls).json()[0]
    if answer["text"].startswith("Error"):
        raise RuntimeError(answer["text"])
    http.delete(f"/sessions/{session}").raise_for_status()


def measure(sessions: int, config: dict[str, Any]) -> dict[str, Any]:
    image_url = imagecodec.to_data_url(np.zeros((SIDE, SIDE, 3), np.uint8))
    with server_process(config) as (url, server), httpx.Client(base_url=url, timeout=1200) as http:
        time.sleep(2.0)  # let the workers finish importing
        idle_rss, cpu_start = tree_rss(server), tree_cpu_s(server)
        after_each = []
        with PeakSampler(server) as sampler:
            for seed in range(sessions):
                run_session(http, image_url, seed)
                after_each.append(tree_rss(server))
                print(
                    f"session {seed + 1}/{sessions}: RSS {after_each[-1] >> 20} MB",
                    file=sys.stderr,
                    flush=True,
                )
        cpu_s = tree_cpu_s(server) - cpu_start
        time.sleep(1.0)  # releases are fire and forget: let the workers run them
        final_rss = tree_rss(server)
    mib = 2**20
    return {
        "sessions": sessions,
        "image": f"{SIDE}x{SIDE} PNG ({len(image_url) // 1024} KB as a data URL)",
        "tool_settings": config or "none (the code's defaults)",
        "cpu_s_per_session": round(cpu_s / sessions, 2),
        "rss_idle_mb": round(idle_rss / mib),
        "rss_peak_mb": round(sampler.peak / mib),
        "rss_after_each_session_mb": [round(rss / mib) for rss in after_each],
        "rss_final_mb": round(final_rss / mib),
        "rss_growth_mb": round((final_rss - idle_rss) / mib),
        "bound_mb": round((idle_rss + RSS_SLACK) / mib),
        "within_bound": final_rss <= idle_rss + RSS_SLACK,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--max-render-pixels", type=int, default=None)
    parser.add_argument("--cache-mb", type=float, default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    config: dict[str, Any] = {}
    if args.max_render_pixels is not None:
        config["max_render_pixels"] = args.max_render_pixels
    if args.cache_mb is not None:
        config["cache_mb"] = args.cache_mb
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_average": [round(load, 2) for load in os.getloadavg()],
        "cpus": os.cpu_count(),
        **measure(args.sessions, config),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    if not result["within_bound"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
