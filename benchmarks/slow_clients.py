"""Slowloris against a Toolshed server: sockets that drip their headers, a body at 1 byte/s, `/health` probed.

Run: `python benchmarks/slow_clients.py --json`. The server runs in its own process, as `spacetools
serve` runs it, with its default limits (headers within 10 s, a body within 30 s, 1,024 connections
per client, 2,048 in all). `--sockets` connections from 127.0.0.1 each send one header byte every
`--drip-s` seconds, one from 127.0.0.3 sends a `POST /sessions` body at 1 byte/s, while `/health` is probed every
100 ms from 127.0.0.1 (the slow client's own address) and from 127.0.0.2 (another client). All of it
stops after `--seconds`. Reported: how the dripping connections ended (a 408, a 503 at connect, or
still open) and when, the body's fate, and the probes' answers and latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from typing import Any

import numpy as np

from served import server_in_subprocess

SERVER = """
import sys, uvicorn
from spacetools.tools.diagnostics import EchoTool
from spacetools.toolshed import ToolDeployment
from spacetools.toolshed.http import create_app, return_freed_memory, toolshed_for
from spacetools.toolshed.limits import ServerLimits

return_freed_memory()
limits = ServerLimits()
app = create_app(toolshed_for([ToolDeployment(tool=EchoTool, backend="inprocess")], limits), limits)
try:
    from spacetools.toolshed.slow_clients import server_options
    options = server_options(limits)
except ImportError:  # code from before the read deadlines
    from spacetools.toolshed.admission import server_options
    options = server_options(limits.max_connections)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="critical", **options)
"""

HEADERS = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 4000 + b"\r\n\r\n"


async def slow_socket(
    port: int, data: bytes, interval_s: float, head: bytes, stop: float, source: str = "127.0.0.1"
) -> tuple[str, float]:
    """Send `head`, then `data` a byte every `interval_s` from `source` until the server ends it or
    `stop`; how it ended and after how many seconds."""
    began = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError as exc:
        return f"connect failed: {type(exc).__name__}", time.perf_counter() - began
    try:
        writer.write(head)
        for byte in data:
            writer.write(bytes([byte]))
            try:
                answer = await asyncio.wait_for(
                    reader.read(4096), min(interval_s, stop - time.perf_counter())
                )
            except TimeoutError:
                if time.perf_counter() >= stop:
                    return "still open", time.perf_counter() - began
                continue
            status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.1") else "closed"
            return (
                "HTTP " + status
            ) if status != "closed" else "closed, no answer", time.perf_counter() - began
        return "all sent", time.perf_counter() - began
    except (ConnectionError, OSError):
        return "reset", time.perf_counter() - began
    finally:
        writer.close()


async def probe(port: int, source: str, stop: float) -> list[tuple[str, float]]:
    """`GET /health` on a new connection from `source` every 100 ms until `stop`."""
    answers: list[tuple[str, float]] = []
    while time.perf_counter() < stop:
        began = time.perf_counter()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 10
            )
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            kind = "HTTP " + answer.split(b" ", 2)[1].decode() if answer else "closed, no answer"
        except (OSError, TimeoutError) as exc:
            kind = type(exc).__name__
        answers.append((kind, time.perf_counter() - began))
        await asyncio.sleep(0.1)
    return answers


def summary(outcomes: list[tuple[str, float]]) -> dict[str, Any]:
    by_kind: dict[str, list[float]] = {}
    for kind, seconds in outcomes:
        by_kind.setdefault(kind, []).append(seconds)
    return {
        kind: {
            "count": len(times),
            "p50_s": round(float(np.percentile(times, 50)), 3),
            "max_s": round(max(times), 3),
        }
        for kind, times in sorted(by_kind.items())
    }


async def attack(port: int, sockets: int, drip_s: float, seconds: float) -> dict[str, Any]:
    stop = time.perf_counter() + seconds
    body_head = (
        b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n"
    )
    dripping = [asyncio.ensure_future(slow_socket(port, HEADERS, drip_s, b"", stop)) for _ in range(sockets)]
    await asyncio.sleep(0.5)  # the drippers connect first
    body = asyncio.ensure_future(
        slow_socket(port, b'{"images": [' + b" " * 900, 1.0, body_head, stop, source="127.0.0.3")
    )
    own, other = await asyncio.gather(probe(port, "127.0.0.1", stop), probe(port, "127.0.0.2", stop))
    return {
        "dripping_headers": summary(list(await asyncio.gather(*dripping))),
        "body_at_1_byte_a_second": summary([await body]),
        "health_from_the_slow_clients_address": summary(own),
        "health_from_another_client": summary(other),
        "health_answers": dict(Counter(kind for kind, _ in own + other)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=2100)
    parser.add_argument("--drip-s", type=float, default=5.0, help="seconds between a socket's bytes")
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--baseline-src", help="another checkout's src: run against its server first")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    report: dict[str, Any] = {"load": os.getloadavg()[0], "cpus": os.cpu_count()}
    runs = ([("baseline", args.baseline_src)] if args.baseline_src else []) + [("now", None)]
    for name, src in runs:
        env = None if src is None else {**os.environ, "PYTHONPATH": src}
        with server_in_subprocess(SERVER, env=env) as (url, _process):
            port = int(url.rsplit(":", 1)[1])
            report[name] = asyncio.run(attack(port, args.sockets, args.drip_s, args.seconds))
    report["load_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
