"""Worker processes die with the server, even mid-call and under `kill -9`, and leave no `pymp-*` folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# A tool whose call blocks for an hour holding the interpreter lock (a regular expression that
# backtracks for ever), so no thread of its worker can run.
GIL_TOOL = """
import re
from spacetools.kit.definition import Tool, ToolResult, tool_method

class GilTool(Tool):
    name = "gil"

    @tool_method
    def hang(self) -> ToolResult:
        \"\"\"Backtrack for ever.\"\"\"
        re.match(r"(a+)+$", "a" * 64 + "b")
        return ToolResult(text="done")
"""

# A server process: a Toolshed with one worker, busy in a call that would block for an hour.
SERVER = """
import asyncio, json, multiprocessing.util, sys
from spacetools.tools.diagnostics import FaultTool
from spacetools.toolshed import ToolDeployment, Toolshed

TOOL, METHOD = sys.argv[1:]

async def main():
    async with Toolshed([ToolDeployment(tool=TOOL, backend="process", timeout_s=3600)]) as shed:
        hanging = asyncio.ensure_future(shed.open_session([]).call(METHOD, {}))
        router = shed.router(METHOD.partition(".")[0])
        while router.snapshot()["busy"] != 1:
            await asyncio.sleep(0.01)
        print(json.dumps({"worker": router.instances[0].pid, "temp_dir": multiprocessing.util.get_temp_dir()}),
              flush=True)
        await hanging

asyncio.run(main())
"""


def _running(pid: int) -> bool:
    """True while `pid` runs (a zombie nobody reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    ("tool", "method"),
    [
        ("spacetools.tools.diagnostics:FaultTool", "fault.hang"),  # sleeping: the watch thread acts
        ("gil_tool:GilTool", "gil.hang"),  # holding the interpreter lock: the kernel acts
    ],
)
def test_a_worker_busy_in_a_call_dies_with_its_killed_server(tmp_path: Path, tool: str, method: str) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "gil_tool.py").write_text(GIL_TOOL)
    python_path = os.pathsep.join([str(tmp_path / "tools"), os.environ.get("PYTHONPATH", "")])
    # TMPDIR: the server's multiprocessing folder goes where this test can see it.
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, tool, method],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": python_path},
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line, server.communicate(timeout=30)[1][-2000:]
        started = json.loads(line)
        worker, temp_dir = started["worker"], Path(started["temp_dir"])
        assert _running(worker) and temp_dir.parent == tmp_path and temp_dir.name.startswith("pymp-")
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        deadline = time.monotonic() + 20
        while (_running(worker) or temp_dir.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(worker), "the worker outlived its server"
        if method == "fault.hang":  # a worker killed by the kernel cannot clean up
            assert not temp_dir.exists(), f"left behind: {sorted(p.name for p in tmp_path.iterdir())}"
    finally:
        if server.poll() is None:
            server.kill()
