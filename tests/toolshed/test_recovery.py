"""A tool whose restarts fail keeps retrying, reports itself unavailable, and comes back; hostile
arguments never make `Session.call` raise; client scene specs name catalogue objects only."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import numpy as np
import pytest
from serving import serving, wait_for_stats

from spacetools.kit.definition import ToolError, ToolResult, tool_method
from spacetools.sim.scene import MAX_SCENE_OBJECTS
from spacetools.tools.diagnostics import EchoTool, SleepTool
from spacetools.tools.simworld import parse_spec
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.backends.inprocess import MAX_HUNG_THREADS


class OutageTool(SleepTool):
    """A tool whose `setup()` fails while `broken` is set, as one whose model server is down would."""

    name = "outage"
    broken = threading.Event()

    def setup(self) -> None:
        if OutageTool.broken.is_set():
            raise OSError("the model server is down")

    @tool_method
    def stall(self) -> ToolResult:
        """Block past the timeout, so the instance is replaced."""
        threading.Event().wait(5)
        return ToolResult(text="late")


def test_a_tool_whose_restart_fails_comes_back_when_setup_works_again() -> None:
    OutageTool.broken.clear()
    shed = Toolshed([ToolDeployment(tool=OutageTool, backend="inprocess", timeout_s=0.2)])
    shed.router("outage").max_retry_s = 0.1  # retry often: the test waits on outcomes, not on time
    with serving(shed) as url, httpx.Client(base_url=url) as http:
        session_id = http.post("/sessions", json={"images": []}).json()["id"]

        def call(name: str) -> dict[str, Any]:
            body = [{"name": name, "arguments": {}}]
            return http.post(f"/sessions/{session_id}/calls", json=body).json()[0]

        assert http.get("/health").json()["tools"]["outage"]["available"]
        OutageTool.broken.set()
        assert call("outage.stall")["text"].startswith("Error: TimeoutError")  # the instance is replaced...
        stats = wait_for_stats(http, lambda stats: stats["tools"]["outage"]["failed_restarts"] >= 3)
        assert not stats["tools"]["outage"]["available"]  # ...and its restarts keep failing
        health = http.get("/health").json()
        assert health["status"] == "degraded" and not health["tools"]["outage"]["available"]
        assert "the model server is down" in health["tools"]["outage"]["detail"]
        refused = call("outage.noop")
        assert refused["is_error"] and "the outage tool is unavailable (restarting)" in refused["text"]

        OutageTool.broken.clear()
        wait_for_stats(http, lambda stats: stats["tools"]["outage"]["available"])
        assert call("outage.noop") == {
            "text": "ok",
            "is_error": False,
            "variables": [],
            "images": [],
            "value": None,
            "image_indices": [],
        }
        health = http.get("/health").json()
        assert health["status"] == "ok" and health["tools"]["outage"]["live_instances"] == 1


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"text": ' + "1" * 4301 + "}", "Error: the arguments for echo.echo are not valid JSON: Exceeds"),
        (
            '{"text": ' + "[" * 1000 + "]" * 1000 + "}",
            "Error: the arguments for echo.echo are not valid JSON",
        ),
        ({"text": 10**5000}, "Error: ValueError: Exceeds the limit (4300 digits)"),  # from Python, no JSON
        ({"text": json.loads("[" * 900 + "]" * 900)}, "Error: the arguments for echo.echo are nested deeper"),
        ({"text": "\ud800"}, "\ud800"),
        ({"text": float("nan")}, "Error: invalid arguments for echo.echo"),
    ],
)
def test_hostile_arguments_never_make_session_call_raise(arguments: Any, expected: str) -> None:
    async def scenario() -> ToolResult:
        async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as shed:
            return await shed.open_session([]).call("echo.echo", arguments)

    assert asyncio.run(scenario()).text.startswith(expected)


def _spec(**object_fields: Any) -> dict[str, Any]:
    camera = {"width": 64, "height": 48, "fx": 50.0, "fy": 50.0, "cx": 32.0, "cy": 24.0}
    camera["cam_to_world"] = np.eye(4).tolist()
    obj = {
        "index": 0,
        "name": "red mug",
        "category": "mug",
        "shape": "asset",
        "asset": "objects/mug.urdf",
        "position": (0.0, 0.0, 0.0),
        "orientation": (0.0, 0.0, 0.0, 1.0),
        "half_extents": (0.05, 0.05, 0.05),
        **object_fields,
    }
    return {"seed": 0, "objects": [obj], "camera": camera}


def test_a_catalogue_scene_spec_is_accepted() -> None:
    assert parse_spec(json.dumps(_spec())).objects[0].asset == "objects/mug.urdf"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (_spec(asset="/etc/hostname"), "is not in the object catalogue"),
        (_spec(asset="../../../../tmp/evil.urdf"), "is not in the object catalogue"),
        (_spec(half_extents=(1e300, 1.0, 1.0)), "half_extents must be in"),
        (_spec(scale=1e9), "less than or equal to 10"),
        (_spec(position=(float("nan"), 0.0, 0.0)), "finite number"),
    ],
)
def test_a_scene_spec_naming_a_path_or_absurd_numbers_is_refused(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match="the image's scene spec is not valid") as info:
        parse_spec(json.dumps(spec, allow_nan=True))
    assert message in str(info.value)


def test_a_scene_spec_with_too_many_objects_is_refused() -> None:
    spec = _spec()
    spec["objects"] = [{**spec["objects"][0], "index": i} for i in range(1600)]
    with pytest.raises(ToolError, match=f"at most {MAX_SCENE_OBJECTS} items"):
        parse_spec(json.dumps(spec))


class HangTool(SleepTool):
    """Calls that hang until the test lets them go."""

    name = "hang"
    release = threading.Event()

    @tool_method
    def stuck(self) -> ToolResult:
        """Block until released."""
        HangTool.release.wait(60)
        return ToolResult(text="late")


def test_in_process_threads_stuck_in_hung_calls_are_bounded() -> None:
    HangTool.release.clear()

    def hung_threads() -> int:
        return sum(thread.name == "toolshed-hang" and thread.is_alive() for thread in threading.enumerate())

    async def scenario() -> tuple[list[str], int, str, str]:
        async with Toolshed([ToolDeployment(tool=HangTool, backend="inprocess", timeout_s=0.5)]) as shed:
            shed.router("hang").max_retry_s = 0.1
            session = shed.open_session([])
            texts = [(await session.call("hang.stuck")).text for _ in range(MAX_HUNG_THREADS + 2)]
            most = hung_threads()
            HangTool.release.set()  # the stuck calls return; their threads end
            while not shed.router("hang").available:
                await asyncio.sleep(0.02)
            return (
                texts,
                most,
                (await session.call("hang.noop")).text,
                str(shed.router("hang").availability()),
            )

    texts, most, after, availability = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert (
        texts[:MAX_HUNG_THREADS]
        == ["Error: TimeoutError: hang.stuck did not finish within 0.5 s"] * MAX_HUNG_THREADS
    )
    assert all("threads are still stuck in calls that timed out" in text for text in texts[MAX_HUNG_THREADS:])
    assert most == MAX_HUNG_THREADS  # and no live instance beside them
    assert after == "ok", availability
