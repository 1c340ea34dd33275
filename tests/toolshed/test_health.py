"""Health tells the truth: a tool with no live instance is "degraded", a worker killed while idle is
replaced without a call, and a worker killed while it starts is started again at once (no back-off,
no "unavailable"), while a failing setup still backs off."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from serving import serving, wait_for_stats

from spacetools.tools.diagnostics import SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed


class GatedSetupTool(SleepTool):
    """A tool whose `setup()` announces its worker's pid in the `gate` folder, then waits until the test
    creates `gate/open`: the test sees and controls each start across processes."""

    name = "gated"
    config_keys: ClassVar[frozenset[str]] = frozenset({"gate"})

    def setup(self) -> None:
        gate = Path(self.config["gate"])
        (gate / f"starting-{os.getpid()}").touch()
        deadline = time.monotonic() + 60
        while not (gate / "open").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the test never opened the gate")
            time.sleep(0.01)


def wait_until(check: Any, what: str) -> Any:
    """Poll `check` until it returns something true (the deadline only bounds a failing test)."""
    deadline = time.monotonic() + 30
    while not (value := check()):
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)
    return value


def starting_pids(gate: Path) -> set[int]:
    return {int(path.name.removeprefix("starting-")) for path in gate.glob("starting-*")}


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    (tmp_path / "open").touch()
    return tmp_path


@pytest.fixture
def http(gate: Path) -> Iterator[httpx.Client]:
    deployment = ToolDeployment(
        tool=GatedSetupTool, backend="process", config={"gate": str(gate)}, timeout_s=30
    )
    with serving(Toolshed([deployment])) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def test_a_worker_killed_while_idle_is_replaced_without_a_call_and_health_says_so(
    http: httpx.Client, gate: Path
) -> None:
    health = http.get("/health").json()
    assert health["status"] == "ok" and health["tools"]["gated"]["live_instances"] == 1
    (first,) = starting_pids(gate)
    (gate / "open").unlink()  # the replacement's setup will wait
    os.kill(first, signal.SIGKILL)
    # No call is made: the router notices the death and starts a replacement by itself.
    second = wait_until(lambda: starting_pids(gate) - {first}, "a replacement starting")
    health = http.get("/health").json()
    assert health["status"] == "degraded"
    assert health["tools"]["gated"]["live_instances"] == 0
    assert "no gated instance is live" in health["tools"]["gated"]["detail"]
    (gate / "open").touch()
    stats = wait_for_stats(http, lambda stats: stats["tools"]["gated"]["live_instances"] == 1)
    assert stats["tools"]["gated"]["restarts"] == 1 and stats["tools"]["gated"]["crashes"] == 1
    assert http.get("/health").json()["status"] == "ok"
    assert second


def test_a_worker_killed_while_starting_is_started_again_at_once(http: httpx.Client, gate: Path) -> None:
    (first,) = starting_pids(gate)
    (gate / "open").unlink()
    os.kill(first, signal.SIGKILL)
    (second,) = wait_until(lambda: starting_pids(gate) - {first}, "a replacement starting")
    os.kill(second, signal.SIGKILL)  # killed during its setup: not a failure of the tool
    wait_until(lambda: starting_pids(gate) - {first, second}, "a start after the killed one")
    tool = http.get("/stats").json()["tools"]["gated"]
    assert tool["available"] and tool["failed_restarts"] == 1
    assert "unavailable" not in (tool["detail"] or "")
    (gate / "open").touch()
    stats = wait_for_stats(http, lambda stats: stats["tools"]["gated"]["live_instances"] == 1)
    assert stats["tools"]["gated"]["restarts"] == 1
    session_id = http.post("/sessions", json={"images": []}).json()["id"]
    body = [{"name": "gated.noop", "arguments": {}}]
    assert http.post(f"/sessions/{session_id}/calls", json=body).json()[0]["text"] == "ok"
