"""Worker-process instances under faults: crashes, kills, hangs and a 1000-call soak.

One Toolshed (and so few worker starts) serves the whole module, on one event loop.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from spacetools.tools.diagnostics import FaultTool, SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed

T = TypeVar("T")
TIMEOUT_S = 3.0  # long enough that a healthy call never reaches it on a loaded machine


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    yield event_loop
    event_loop.close()


@pytest.fixture(scope="module")
def shed(loop: asyncio.AbstractEventLoop) -> Iterator[Toolshed]:
    toolshed = Toolshed(
        [
            ToolDeployment(tool=FaultTool, backend="process", instances=3, timeout_s=TIMEOUT_S),
            ToolDeployment(tool=SleepTool, backend="process", instances=1, timeout_s=3.0),
        ]
    )
    loop.run_until_complete(toolshed.start())
    yield toolshed
    loop.run_until_complete(toolshed.close())


def _run(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    return loop.run_until_complete(coroutine)


async def _settled(shed: Toolshed, tool: str, instances: int) -> None:
    """Wait until background restarts have brought the pool back to full strength."""
    router = shed.router(tool)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if router.snapshot()["idle"] == instances and all(i.alive for i in router.instances):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{tool} did not recover: {router.snapshot()}")


def test_workers_run_in_their_own_processes(loop: asyncio.AbstractEventLoop, shed: Toolshed) -> None:
    pids = [instance.pid for instance in shed.router("fault").instances]
    assert len(set(pids)) == 3 and os.getpid() not in pids
    result = _run(loop, shed.open_session([]).call("fault.make_array", {"n": 4}))
    assert result.variables["array"].tolist() == [1.0] * 4


def test_a_crash_mid_call_is_an_error_result_and_the_instance_restarts(
    loop: asyncio.AbstractEventLoop, shed: Toolshed
) -> None:
    before = shed.stats()["tools"]["fault"]
    session = shed.open_session([])
    result = _run(loop, session.call("fault.crash", {"exit_code": 7}))
    assert result.is_error  # and told as a crash, not as the timeout a missed death would become
    assert (
        result.text == "Error: RuntimeError: the fault instance crashed (exit code 7); a new one is starting"
    )
    _run(loop, _settled(shed, "fault", 3))
    after = shed.stats()["tools"]["fault"]
    assert after["crashes"] == before["crashes"] + 1 and after["restarts"] == before["restarts"] + 1
    assert _run(loop, session.call("fault.echo", {"text": "ok"})).text == "ok"


def test_an_instance_killed_from_outside_mid_call_is_told_as_a_crash(
    loop: asyncio.AbstractEventLoop, shed: Toolshed
) -> None:
    session = shed.open_session([])
    victim = shed.router("sleep").instances[0].pid
    assert victim is not None

    async def kill_soon() -> None:
        while shed.router("sleep").snapshot()["busy"] != 1:  # mid-call
            await asyncio.sleep(0.01)
        os.kill(victim, signal.SIGKILL)

    async def scenario() -> Any:
        result, _ = await asyncio.gather(session.call("sleep.sleep", {"seconds": 10}), kill_soon())
        return result

    result = _run(loop, scenario())
    # A crash, not the 3 s timeout: the death was noticed while the call ran.
    assert result.text == (
        f"Error: RuntimeError: the sleep instance crashed (exit code {-signal.SIGKILL}); a new one is starting"
    )
    _run(loop, _settled(shed, "sleep", 1))
    assert shed.router("sleep").instances[0].pid != victim
    assert _run(loop, session.call("sleep.sleep", {"seconds": 0})).text == "slept 0 s"


def test_a_hanging_worker_times_out_and_is_replaced(loop: asyncio.AbstractEventLoop, shed: Toolshed) -> None:
    session = shed.open_session([])
    pids_before = {instance.pid for instance in shed.router("fault").instances}
    result = _run(loop, session.call("fault.hang", {}))
    assert result.text == f"Error: TimeoutError: fault.hang did not finish within {TIMEOUT_S:g} s"
    _run(loop, _settled(shed, "fault", 3))
    pids_after = {instance.pid for instance in shed.router("fault").instances}
    assert len(pids_before - pids_after) == 1  # exactly the hung worker was killed
    for pid in pids_before - pids_after:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


class BrokenTool(SleepTool):
    """A tool whose weights are missing."""

    name = "broken"

    def setup(self) -> None:
        raise OSError("no weights at /models/broken/weights.bin")


def test_setup_failure_is_reported_at_start(loop: asyncio.AbstractEventLoop) -> None:
    broken = Toolshed([ToolDeployment(tool=BrokenTool, backend="process")])
    with pytest.raises(RuntimeError) as info:
        _run(loop, broken.start())
    assert str(info.value) == (
        "tool broken failed to start: broken setup failed: OSError: no weights at weights.bin"
    )


@pytest.mark.slow
def test_soak_every_call_gets_exactly_one_result(loop: asyncio.AbstractEventLoop, shed: Toolshed) -> None:
    """1000 calls from 50 concurrent sessions, with injected crashes, hangs and exceptions."""
    _run(loop, _settled(shed, "fault", 3))
    before = shed.stats()["tools"]["fault"]
    rng = random.Random(4)
    kinds = ["crash"] * 15 + ["hang"] * 6 + ["raise"] * 30 + ["echo"] * 949
    rng.shuffle(kinds)
    calls: list[tuple[str, dict[str, Any]]] = []
    for index, kind in enumerate(kinds):
        if kind == "crash":
            calls.append(("fault.crash", {}))
        elif kind == "hang":
            calls.append(("fault.hang", {"seconds": 20}))
        elif kind == "raise":
            calls.append(("fault.raise_error", {"message": f"boom {index}"}))
        else:
            calls.append(("fault.echo", {"text": f"token {index}"}))
    sessions = [shed.open_session([], seed=s) for s in range(50)]

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            *(sessions[index % 50].call(name, arguments) for index, (name, arguments) in enumerate(calls))
        )

    results = _run(loop, scenario())
    assert len(results) == len(calls)
    for index, (kind, result) in enumerate(zip(kinds, results, strict=True)):
        expected = {
            "echo": f"token {index}",
            "raise": f"Error: RuntimeError: boom {index}",
            "hang": f"Error: TimeoutError: fault.hang did not finish within {TIMEOUT_S:g} s",
        }.get(kind, "Error: RuntimeError: the fault instance crashed (exit code 3); a new one is starting")
        assert result.text == expected, (index, kind, result.text)
        assert result.is_error == (kind != "echo")
    _run(loop, _settled(shed, "fault", 3))
    after = shed.stats()["tools"]["fault"]
    assert after["calls"] - before["calls"] == 1000
    assert after["errors"] - before["errors"] == 51
    assert after["timeouts"] - before["timeouts"] == 6
    assert after["crashes"] - before["crashes"] == 15
    assert after["restarts"] - before["restarts"] == 21
