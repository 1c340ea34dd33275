"""The Toolshed's guarantees on every backend: in-process threads, worker processes and Ray actors.

Crashes, kills from outside, hangs, exceptions, restarts, timeouts, parallel calls, variable limits,
batching and autoscaling. One Toolshed per backend serves the module, on one event loop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest

from spacetools.tools.diagnostics import FaultTool, SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed

T = TypeVar("T")
TIMEOUT_S = 1.0
BACKENDS = ["inprocess", "process", "ray"]
# Ray actors reserve a tenth of a CPU each, so the tests' actors (and replacements) fit the test Ray.
RAY_SHARE = {"num_cpus": 0.1}


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    yield event_loop
    event_loop.close()


def _run(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    return loop.run_until_complete(coroutine)


def _deployments(backend: str) -> list[ToolDeployment]:
    share = RAY_SHARE if backend == "ray" else {}
    return [
        ToolDeployment(tool=FaultTool, backend=backend, instances=2, timeout_s=TIMEOUT_S, **share),
        ToolDeployment(
            tool=SleepTool,
            backend=backend,
            instances=3,
            timeout_s=5.0,
            batch_size=4,
            batch_window_ms=50,
            placement="pack" if backend == "ray" else None,
            **share,
        ),
    ]


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("local_ray")
    return str(request.param)


@pytest.fixture(scope="module")
def shed(loop: asyncio.AbstractEventLoop, backend: str) -> Iterator[Toolshed]:
    toolshed = Toolshed(_deployments(backend), max_session_bytes=1_000_000)
    _run(loop, toolshed.start())
    yield toolshed
    _run(loop, toolshed.close())


async def _settled(shed: Toolshed, tool: str, instances: int) -> None:
    """Wait until background restarts have brought the pool back to full strength."""
    router = shed.router(tool)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if router.snapshot()["idle"] == instances and all(i.alive for i in router.instances):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{tool} did not recover: {router.snapshot()}")


def test_calls_of_one_turn_run_on_several_instances_at_once(
    loop: asyncio.AbstractEventLoop, shed: Toolshed
) -> None:
    session = shed.open_session([])
    router = shed.router("fault")
    busy_seen: list[int] = []

    async def watch() -> None:
        while not busy_seen or busy_seen[-1] < 2:
            busy_seen.append(router.snapshot()["busy"])
            await asyncio.sleep(0.01)

    async def scenario() -> list[Any]:
        calls = session.call_many([("fault.hang", {"seconds": 0.5}), ("fault.hang", {"seconds": 0.5})])
        results, _ = await asyncio.gather(calls, asyncio.wait_for(watch(), 5))
        return results

    results = _run(loop, scenario())
    assert [r.text for r in results] == ["woke up after 0.5 s"] * 2
    assert max(busy_seen) == 2


def test_a_tool_exception_is_an_error_result_and_the_instance_stays(
    loop: asyncio.AbstractEventLoop, shed: Toolshed
) -> None:
    pids = [instance.pid for instance in shed.router("fault").instances]
    session = shed.open_session([])
    result = _run(loop, session.call("fault.raise_error", {"message": "boom in /srv/tools/x.py"}))
    assert result.is_error and result.text == "Error: RuntimeError: boom in x.py"
    assert [instance.pid for instance in shed.router("fault").instances] == pids


def test_a_crash_mid_call_is_an_error_result_and_the_instance_restarts(
    loop: asyncio.AbstractEventLoop, shed: Toolshed, backend: str
) -> None:
    session = shed.open_session([])
    result = _run(loop, session.call("fault.crash", {"exit_code": 7}))
    if backend == "inprocess":  # nothing to crash but the server itself
        assert result.text == (
            "Error: fault.crash only runs in a worker process (deploy with backend='process')"
        )
        return
    before_restarts = shed.stats()["tools"]["fault"]["restarts"]
    exit_code = 7 if backend == "process" else None  # Ray does not report a worker's exit code
    assert result.text == (
        f"Error: RuntimeError: the fault instance crashed (exit code {exit_code}); a new one is starting"
    )
    _run(loop, _settled(shed, "fault", 2))
    after = shed.stats()["tools"]["fault"]
    assert after["crashes"] >= 1 and after["restarts"] >= before_restarts
    assert _run(loop, session.call("fault.echo", {"text": "ok"})).text == "ok"


def test_an_instance_killed_from_outside_mid_call_returns_an_error(
    loop: asyncio.AbstractEventLoop, shed: Toolshed, backend: str
) -> None:
    if backend == "inprocess":
        pytest.skip("an in-process instance has no process of its own to kill")
    session = shed.open_session([])
    victim = shed.router("fault").instances[0].pid
    assert victim is not None and victim != os.getpid()

    async def kill_soon() -> None:
        await asyncio.sleep(0.3)
        os.kill(victim, signal.SIGKILL)

    async def scenario() -> list[Any]:
        calls = [session.call("fault.hang", {"seconds": 0.8}) for _ in range(2)]
        return list(await asyncio.gather(*calls, kill_soon()))[:2]

    results = _run(loop, scenario())
    texts = sorted(result.text for result in results)
    assert texts[1] == "woke up after 0.8 s"
    assert texts[0].startswith("Error: RuntimeError: the fault instance crashed (exit code ")
    _run(loop, _settled(shed, "fault", 2))
    assert victim not in [instance.pid for instance in shed.router("fault").instances]


def test_an_instance_that_dies_while_idle_is_replaced_before_a_call_reaches_it(
    loop: asyncio.AbstractEventLoop, shed: Toolshed, backend: str
) -> None:
    if backend == "inprocess":
        pytest.skip("an in-process instance has no process of its own to kill")
    _run(loop, _settled(shed, "fault", 2))
    router = shed.router("fault")
    victim = router.instances[0]
    before = shed.stats()["tools"]["fault"]
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)

    async def noticed() -> None:
        deadline = time.monotonic() + 20
        while victim.alive:
            assert time.monotonic() < deadline, "the death of an idle instance went unnoticed"
            await asyncio.sleep(0.02)

    _run(loop, noticed())
    session = shed.open_session([])
    results = _run(loop, session.call_many([("fault.echo", {"text": str(i)}) for i in range(4)]))
    assert [r.text for r in results] == ["0", "1", "2", "3"]
    _run(loop, _settled(shed, "fault", 2))
    after = shed.stats()["tools"]["fault"]
    assert after["crashes"] == before["crashes"] + 1 and after["restarts"] == before["restarts"] + 1


def test_a_hanging_call_times_out_and_its_instance_is_replaced(
    loop: asyncio.AbstractEventLoop, shed: Toolshed
) -> None:
    session = shed.open_session([])
    before = shed.stats()["tools"]["fault"]
    result = _run(loop, session.call("fault.hang", {"seconds": 30}))
    assert result.text == f"Error: TimeoutError: fault.hang did not finish within {TIMEOUT_S:g} s"
    _run(loop, _settled(shed, "fault", 2))
    after = shed.stats()["tools"]["fault"]
    assert after["timeouts"] == before["timeouts"] + 1
    assert after["restarts"] == before["restarts"] + 1
    assert _run(loop, session.call("fault.echo", {"text": "alive"})).text == "alive"


def test_async_methods_run_on_every_backend(loop: asyncio.AbstractEventLoop, shed: Toolshed) -> None:
    session = shed.open_session([])

    async def scenario() -> list[str]:
        results = await session.call_many(
            [
                ("sleep.noop_async", {}),
                ("sleep.sleep_async", {"seconds": 0.01}),
                ("sleep.sleep_async", {"seconds": -1}),
            ]
        )
        return [result.text for result in results]

    assert _run(loop, scenario()) == [
        "ok",
        "slept 0.01 s",
        "Error: seconds must be between 0 and 60 (got -1.0)",
    ]


def test_variables_stay_on_the_server_side_and_respect_the_session_limit(
    loop: asyncio.AbstractEventLoop, shed: Toolshed, backend: str
) -> None:
    session = shed.open_session([])
    made = _run(loop, session.call("fault.make_array", {"n": 200_000}))  # 800 kB, under the 1 MB cap
    assert not made.is_error and "Note" not in made.text
    held = session.variables["array"]
    if backend == "ray":  # left in the object store; the session holds a handle
        assert type(held).__name__ == "ClusterArray"
    assert np.asarray(held).shape == (200_000,) and float(np.asarray(held).mean()) == 1.0
    assert shed.stats()["sessions"]["variable_bytes"] >= 800_000
    described = _run(loop, session.call("fault.describe", {"data": "$array"}))
    assert described.text == "array of shape (200000,), dtype float32, mean 1.0000"
    too_big = _run(loop, session.call("fault.make_array", {"n": 300_000}))  # 1.2 MB
    assert too_big.text.endswith("(Note: $array could not be kept within the session memory limit.)")
    again = _run(loop, session.call("fault.describe", {"data": "$array"}))
    assert again.text.startswith("Error: variable $array was evicted to stay within the memory limit")
    session.close()


def test_every_call_sees_its_own_session_as_it_grows(loop: asyncio.AbstractEventLoop, shed: Toolshed) -> None:
    """A session's image sizes and attachments go to an instance once, and again when they change."""
    image = np.zeros((4, 6, 3), np.uint8)
    first = shed.open_session([image], [{"scene": "a"}])
    second = shed.open_session([image, image], [None, {"note": "b"}])

    def contexts() -> list[str]:
        calls = [("fault.context", None)] * 4  # over both fault instances
        texts = [r.text for r in _run(loop, first.call_many(calls))]
        return texts + [r.text for r in _run(loop, second.call_many(calls))]

    assert contexts() == ["4x6 ['scene']"] * 4 + ["4x6 []; 4x6 ['note']"] * 4
    first.add_image(np.zeros((2, 3, 3), np.uint8), {"scene": "c"})
    assert contexts() == ["4x6 ['scene']; 2x3 ['scene']"] * 4 + ["4x6 []; 4x6 ['note']"] * 4
    first.close()
    second.close()
    third = shed.open_session([])
    assert _run(loop, third.call("fault.context")).text == "no images"


def test_concurrent_calls_are_batched_with_errors_kept_per_call(
    loop: asyncio.AbstractEventLoop, shed: Toolshed
) -> None:
    session = shed.open_session([])
    batching_before = shed.stats()["tools"]["sleep"]["batching"][0]
    seconds = [0.2, 0.1, -1.0, 0.0]
    results = _run(loop, session.call_many([("sleep.sleep", {"seconds": s}) for s in seconds]))
    assert [r.text for r in results] == [
        "slept 0.2 s",
        "slept 0.1 s",
        "Error: seconds must be between 0 and 60 (got -1.0)",
        "slept 0 s",
    ]
    assert [r.is_error for r in results] == [False, False, True, False]
    batching = shed.stats()["tools"]["sleep"]["batching"][0]
    assert batching["batches"] == batching_before["batches"] + 1
    assert batching["calls"] == batching_before["calls"] + 4


def test_the_pool_grows_under_load_and_shrinks_when_idle(
    loop: asyncio.AbstractEventLoop, backend: str
) -> None:
    share = RAY_SHARE if backend == "ray" else {}
    deployment = ToolDeployment(
        tool=SleepTool, backend=backend, instances=1, max_instances=3, scale_down_idle_s=0.3, **share
    )

    async def scenario() -> dict[str, Any]:
        async with Toolshed([deployment]) as toolshed:
            session = toolshed.open_session([])
            calls = [session.call("sleep.sleep", {"seconds": 1.0}) for _ in range(6)]
            results = await asyncio.gather(*calls)
            assert [r.text for r in results] == ["slept 1 s"] * 6
            deadline = time.monotonic() + 30

            def shrunk_back() -> bool:
                stats = toolshed.stats()["tools"]["sleep"]
                return stats["instances"] == 1 and len(stats["autoscale"]["events"]) >= 3

            while not shrunk_back() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return toolshed.stats()["tools"]["sleep"]

    stats = _run(loop, scenario())
    events = stats["autoscale"]["events"]
    assert events[0]["from"] == 1 and events[0]["to"] == 3
    assert "calls queued" in events[0]["reason"]
    assert stats["instances"] == 1 and [e["to"] for e in events[-2:]] == [2, 1]
    assert all("idle for 0.3 s" in e["reason"] for e in events[-2:])


def test_a_standby_instance_joins_the_pool_at_once_and_another_takes_its_place(
    loop: asyncio.AbstractEventLoop, backend: str
) -> None:
    share = RAY_SHARE if backend == "ray" else {}
    deployment = ToolDeployment(
        tool=SleepTool, backend=backend, instances=1, max_instances=2, standby_instances=1, **share
    )

    async def standby_ready(router: Any) -> Any:
        deadline = time.monotonic() + 60
        while not router.standby:
            assert time.monotonic() < deadline, "no standby instance started"
            await asyncio.sleep(0.02)
        return router.standby[0]

    async def scenario() -> None:
        async with Toolshed([deployment]) as toolshed:
            router = toolshed.router("sleep")
            spare = await standby_ready(router)
            assert spare.alive and spare not in router.instances
            assert await router.grow(1) == (1, None)
            assert router.instances[-1] is spare  # it joined as it was: no new start was waited for
            assert await standby_ready(router) is not spare  # a new one started in its place
            session = toolshed.open_session([])
            results = await session.call_many([("sleep.sleep", {"seconds": 0.0})] * 2)
            assert [r.text for r in results] == ["slept 0 s"] * 2
            stats = toolshed.stats()["tools"]["sleep"]
            assert stats["instances"] == 2 and stats["standby"] == 1

    _run(loop, scenario())


def test_setup_failure_is_reported_at_start(loop: asyncio.AbstractEventLoop, backend: str) -> None:
    share = RAY_SHARE if backend == "ray" else {}
    broken = Toolshed(
        [ToolDeployment(tool=FaultTool, backend=backend, config={"setup_error": "no weights found"}, **share)]
    )
    with pytest.raises(RuntimeError) as info:
        _run(loop, broken.start())
    assert str(info.value) == "tool fault failed to start: fault setup failed: OSError: no weights found"
