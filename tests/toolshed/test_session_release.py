"""Tools that hold state per session free it when the session closes, on every backend.

A tool overrides `Tool.release_session`; the Toolshed calls it on every live instance when a session
is released (or expires, see test_session_store), after the calls already sent to that instance.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from spacetools.kit.definition import Tool, ToolContext, ToolResult, tool_method
from spacetools.sim.layout import build_scene
from spacetools.sim.robot import MotionError
from spacetools.sim.robotworlds import RobotWorlds
from spacetools.tools.robot import RobotTool
from spacetools.toolshed import ToolDeployment, Toolshed

IMAGE = np.zeros((8, 8, 3), np.uint8)


class LedgerTool(Tool):
    """Holds a note per session until the session is released."""

    name = "ledger"

    def setup(self) -> None:
        self.notes: dict[str, str] = {}

    @tool_method
    def note(self, text: str, *, ctx: ToolContext) -> ToolResult:
        """Keep a note for this session; answers the sessions this instance holds notes for.

        Args:
            text: The note.
        """
        self.notes[ctx.session_id] = text
        return ToolResult(text=text, value=sorted(self.notes))

    @tool_method
    def sessions(self) -> ToolResult:
        """The sessions this instance holds notes for."""
        return ToolResult(text=str(len(self.notes)), value=sorted(self.notes))

    def release_session(self, session_id: str) -> None:
        self.notes.pop(session_id, None)


class BrokenLedgerTool(LedgerTool):
    """A ledger whose release hook fails."""

    name = "broken_ledger"

    def release_session(self, session_id: str) -> None:
        raise RuntimeError("cannot release")


class AsyncLedgerTool(LedgerTool):
    """The ledger with async methods: on the in-process backend they run on the event loop, and so do
    its releases, after the call in progress."""

    name = "async_ledger"

    @tool_method
    async def note_slowly(self, text: str, seconds: float, *, ctx: ToolContext) -> ToolResult:
        """Keep a note for this session, wait, then answer the sessions this instance holds notes for.

        Args:
            text: The note.
            seconds: How long to wait after taking the note.
        """
        self.notes[ctx.session_id] = text
        await asyncio.sleep(seconds)
        return ToolResult(text=text, value=sorted(self.notes))

    @tool_method
    async def held(self) -> ToolResult:
        """The sessions this instance holds notes for."""
        return ToolResult(text=str(len(self.notes)), value=sorted(self.notes))


class WorldCountingRobot(RobotTool):
    """The robot tool, telling how many simulated worlds its instance holds."""

    @tool_method
    def open_worlds(self) -> ToolResult:
        """How many simulated worlds this instance holds."""
        return ToolResult(text=str(len(self._worlds)), value=len(self._worlds))


def test_only_tools_that_hold_session_state_are_told() -> None:
    from spacetools.kit.definition import releases_sessions
    from spacetools.tools.robot import RobotTool as Robot

    assert releases_sessions(LedgerTool) and releases_sessions(Robot)
    assert not releases_sessions(Tool) and not releases_sessions(type("Plain", (Tool,), {"name": "plain"}))


@pytest.mark.parametrize("backend", ["inprocess", "process"])
def test_a_released_session_is_freed_on_every_instance(backend: str) -> None:
    async def scenario() -> None:
        async with Toolshed([ToolDeployment(tool=LedgerTool, backend=backend, instances=2)]) as shed:
            first, second = shed.open_session([IMAGE]), shed.open_session([IMAGE])
            # Both calls at once: the two sessions' notes land on the two instances.
            await asyncio.gather(
                first.call("ledger.note", {"text": "a"}), second.call("ledger.note", {"text": "b"})
            )
            await first.call("ledger.note", {"text": "a2"})
            first.close()
            held = await asyncio.gather(*(second.call("ledger.sessions") for _ in range(4)))
            assert all(first.id not in result.value for result in held)
            assert any(second.id in result.value for result in held)
            second.close()
            third = shed.open_session([IMAGE])
            held = await asyncio.gather(*(third.call("ledger.sessions") for _ in range(4)))
            assert all(result.value == [] for result in held)

    asyncio.run(scenario())


@pytest.mark.parametrize("backend", ["inprocess", "process"])
def test_a_tool_with_async_methods_frees_released_sessions_on_every_instance(backend: str) -> None:
    async def scenario() -> None:
        async with Toolshed([ToolDeployment(tool=AsyncLedgerTool, backend=backend, instances=2)]) as shed:
            first, second = shed.open_session([IMAGE]), shed.open_session([IMAGE])
            await asyncio.gather(
                first.call("async_ledger.note_slowly", {"text": "a", "seconds": 0.05}),
                second.call("async_ledger.note", {"text": "b"}),  # a plain method, on the thread
            )
            first.close()
            held = await asyncio.gather(*(second.call("async_ledger.held") for _ in range(4)))
            assert all(first.id not in result.value for result in held)
            assert any(second.id in result.value for result in held)
            second.close()
            held = await asyncio.gather(*(shed.open_session([]).call("async_ledger.held") for _ in range(4)))
            assert all(result.value == [] for result in held)

    asyncio.run(scenario())


def test_a_release_during_an_async_call_waits_for_the_call_to_end() -> None:
    async def scenario() -> None:
        async with Toolshed([ToolDeployment(tool=AsyncLedgerTool, backend="inprocess")]) as shed:
            session = shed.open_session([IMAGE])
            call = asyncio.ensure_future(
                session.call("async_ledger.note_slowly", {"text": "a", "seconds": 0.2})
            )
            router = shed.router("async_ledger")
            while router.snapshot()["busy"] == 0:  # running: it took its note and sleeps on the loop
                await asyncio.sleep(0.001)
            session.close()
            assert (await call).value == [session.id]  # the release did not cut into the call
            assert (await shed.open_session([]).call("async_ledger.held")).value == []

    asyncio.run(scenario())


@pytest.mark.parametrize("backend", ["inprocess", "process"])
def test_a_failing_release_hook_is_logged_and_the_instance_serves_on(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with Toolshed([ToolDeployment(tool=BrokenLedgerTool, backend=backend)]) as shed:
            first = shed.open_session([IMAGE])
            await first.call("broken_ledger.note", {"text": "a"})
            first.close()  # never raises to the caller
            result = await shed.open_session([IMAGE]).call("broken_ledger.note", {"text": "b"})
            assert not result.is_error and len(result.value) == 2  # the failed release kept the note
            assert shed.router("broken_ledger").stats.crashes == 0

    asyncio.run(scenario())
    if backend == "inprocess":  # (a worker process logs to its own stderr)
        assert "release_session" in caplog.text and "cannot release" in caplog.text


@pytest.fixture(scope="module")
def scene() -> dict[str, Any]:
    with build_scene(1, n_objects=3, with_robot=True) as built:
        return {"spec": built.spec.model_dump_json(), "image": built.render().rgb}


@pytest.mark.parametrize("backend", ["inprocess", "process"])
def test_a_robot_world_is_freed_when_its_session_closes(backend: str, scene: dict[str, Any]) -> None:
    async def scenario() -> None:
        deployment = ToolDeployment(tool=WorldCountingRobot, backend=backend, timeout_s=120)
        async with Toolshed([deployment]) as shed:
            episode = shed.open_session([scene["image"]], [{"scene": scene["spec"]}])
            observer = shed.open_session([scene["image"]])
            assert not (await episode.call("robot.capture_image")).is_error
            assert (await observer.call("robot.open_worlds")).value == 1
            episode.close()
            assert (await observer.call("robot.open_worlds")).value == 0

    asyncio.run(scenario())


def test_on_ray_a_released_session_is_freed_on_every_actor(local_ray: None) -> None:
    import sys

    from ray import cloudpickle

    # The actors cannot import this test module: its tool class travels by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:

        async def scenario() -> None:
            deployment = ToolDeployment(tool=LedgerTool, backend="ray", instances=2, num_cpus=0.1)
            async with Toolshed([deployment]) as shed:
                first, second = shed.open_session([IMAGE]), shed.open_session([IMAGE])
                await asyncio.gather(
                    first.call("ledger.note", {"text": "a"}), second.call("ledger.note", {"text": "b"})
                )
                first.close()
                held = await asyncio.gather(*(second.call("ledger.sessions") for _ in range(4)))
                assert all(first.id not in result.value for result in held)
                assert any(second.id in result.value for result in held)

        asyncio.run(scenario())
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_a_pool_frees_a_closed_sessions_world_and_builds_it_no_more(scene: dict[str, Any]) -> None:
    worlds = RobotWorlds(record_frames=False)
    worlds.for_session("done", scene["spec"])
    worlds.for_session("running", scene["spec"])
    worlds.release_session("done")
    assert len(worlds) == 1
    # A call that was still queued when its session closed finds no world to rebuild.
    with pytest.raises(MotionError, match="session was closed"):
        worlds.for_session("done", scene["spec"])
    kept = RobotWorlds(record_frames=False, keep_closed=True)  # an evaluation scores it afterwards
    world = kept.for_session("done", scene["spec"])
    kept.release_session("done")
    assert kept.find_by_scene(scene["spec"]) is world
    worlds.close()
    kept.close()


def test_an_idle_session_expires_on_a_timer_without_a_request() -> None:
    async def scenario() -> tuple[list[str], list[str], int]:
        deployment = ToolDeployment(tool=LedgerTool, backend="inprocess")
        async with Toolshed([deployment], session_ttl_s=0.2) as shed:
            session = shed.open_session([IMAGE])
            held = (await session.call("ledger.note", {"text": "kept"})).value
            while shed.stats()["sessions"]["expired"] == 0:  # nothing calls the store meanwhile
                await asyncio.sleep(0.02)
            # The instance heard of the release: another session's call sees no note of the first.
            after = (await shed.open_session([]).call("ledger.sessions")).value
            return held, after, shed.stats()["sessions"]["open"]

    held, after, still_open = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert len(held) == 1 and after == [] and still_open == 1
