"""A Toolshed server in its own process for the HTTP benchmarks, as `spacetools serve` runs it.

`python -c CODE PORT [ARGS...]` starts it on a free loopback port; the context yields its base URL and
process once `/health` answers, and stops it after.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx


@contextlib.contextmanager
def server_in_subprocess(
    code: str, *args: str, startup_s: float = 120.0, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run ``code`` (a server script taking its port first) and yield its URL and process when healthy
    (``env``: the process's environment, default this one's)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-c", code, str(port), *args], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if process.poll() is not None:
                raise RuntimeError("the server exited during startup")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=60)
