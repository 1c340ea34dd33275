"""The Toolshed's HTTP front and `RemoteToolshed`, against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import typer
from serving import GateTool, serving, wait_for_stats
from typer.testing import CliRunner

from spacetools.agent.policies.scripted import ScriptedPolicy
from spacetools.agent.rollout import run_episode
from spacetools.agent.types import EpisodeState, Task
from spacetools.cli.serve import serve
from spacetools.kit import imagecodec
from spacetools.kit.definition import Tool, ToolContext, ToolResult, hermes_tools_block, tool_method
from spacetools.tools.diagnostics import EchoTool, FaultTool, SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.client import RemoteSession, RemoteToolshed
from spacetools.toolshed.toolsets import with_profile


def encode_image(image: np.ndarray) -> str:
    return imagecodec.to_data_url(image)


def decode_image(url: str) -> np.ndarray:
    return imagecodec.decode(url)


IMAGE = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)


class MirrorTool(Tool):
    """Returns a conversation image flipped left to right, as a drawing tool returns a picture."""

    name = "mirror"

    @tool_method
    def flip(self, image_index: int, *, ctx: ToolContext) -> ToolResult:
        """Flip an image left to right.

        Args:
            image_index: Which conversation image.
        """
        return ToolResult(
            text=f"flipped image {image_index}", images=[ctx.image(image_index)[:, ::-1].copy()]
        )


DEPLOYMENTS = [
    ToolDeployment(tool=EchoTool, backend="inprocess"),
    ToolDeployment(tool=SleepTool, backend="inprocess", instances=4, timeout_s=5.0),
    ToolDeployment(tool=GateTool, backend="inprocess", instances=3, timeout_s=60.0),
    ToolDeployment(tool=MirrorTool, backend="inprocess"),
    # A worker process, so that fault.crash can kill something other than the server.
    ToolDeployment(tool=FaultTool, backend="process", instances=1, timeout_s=5.0),
]


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serving(Toolshed(DEPLOYMENTS)) as url:
        yield url


@pytest.fixture
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client


def open_session(http: httpx.Client, **body: Any) -> str:
    response = http.post("/sessions", json={"images": [encode_image(IMAGE)], **body})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def call(
    http: httpx.Client, session_id: str, *calls: tuple[str, Any], images: bool = False
) -> list[dict[str, Any]]:
    body = [{"name": name, "arguments": arguments} for name, arguments in calls]
    response = http.post(f"/sessions/{session_id}/calls", params={"images": images}, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_health_and_tool_schemas(http: httpx.Client) -> None:
    health = http.get("/health").json()
    assert health["status"] == "ok" and health["profile"] is None  # no profile given: each tool's own
    schemas = http.get("/tools").json()
    names = [schema["function"]["name"] for schema in schemas]
    assert names[:3] == ["echo.echo", "echo.describe", "echo.random"] and "fault.crash" in names
    assert health["tool_methods"] == len(schemas)
    assert schemas[0]["function"]["parameters"]["required"] == ["text"]
    specs = http.get("/tools/specs").json()  # the same methods, with their (here: no) geometry
    assert [spec["name"] for spec in specs] == names and {str(spec["geometry"]) for spec in specs} == {"{}"}
    hermes = http.get("/tools/hermes")
    assert hermes.headers["content-type"].startswith("text/plain")
    assert hermes.text == hermes_tools_block(Toolshed(DEPLOYMENTS).specs())


def test_a_turn_runs_in_parallel_and_keeps_call_order(http: httpx.Client) -> None:
    session_id = open_session(http)
    turn = [("gate.wait", {"label": "a"}), ("echo.echo", {"text": "first"}), ("gate.wait", '{"label": "b"}')]
    turn.append(("gate.wait", {"label": "c"}))
    GateTool.opened.clear()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(call, http, session_id, *turn)
        # All three gate calls hold an instance at once: they run in parallel, not one after another.
        wait_for_stats(http, lambda stats: stats["tools"]["gate"]["busy"] == 3)
        GateTool.opened.set()
        results = pending.result()
    assert [result["text"] for result in results] == ["a", "first", "b", "c"]
    assert not any(result["is_error"] for result in results)


def test_variables_resolve_on_the_server_across_requests(http: httpx.Client) -> None:
    session_id = open_session(http)
    (made,) = call(http, session_id, ("fault.make_array", {"n": 4}))
    assert made == {
        "text": made["text"],
        "is_error": False,
        "variables": ["array"],
        "value": None,
        "images": [],
        "image_indices": [],
    }
    (described,) = call(http, session_id, ("echo.describe", {"data": "$array"}))
    assert described["text"] == "array of shape (4,), dtype float32, mean 1.0000"
    (missing,) = call(http, session_id, ("echo.describe", {"data": "$depth"}))
    assert missing["is_error"] and missing["text"].startswith("Error: unknown variable $depth.")
    assert missing["text"].endswith("Available variables: $array")
    (not_an_object,) = call(http, session_id, ("echo.echo", [1]))  # the error the model gets in process
    assert not_an_object["text"] == "Error: the arguments for echo.echo must be a JSON object, got list"


def test_the_session_seed_reaches_the_tools_as_in_process() -> None:
    async def in_process() -> str:
        async with Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]) as shed:
            return (await shed.open_session([IMAGE], seed=7).call("echo.random")).text

    expected = asyncio.run(in_process())
    with (
        serving(Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")])) as url,
        httpx.Client(base_url=url) as http,
    ):
        (seeded,) = call(http, open_session(http, seed=7), ("echo.random", {}))
        (other,) = call(http, open_session(http, seed=8), ("echo.random", {}))
    assert seeded["text"] == expected != other["text"]


def test_tool_images_come_back_on_request_and_uploaded_images_are_addressable(http: httpx.Client) -> None:
    session_id = open_session(http)
    (without,) = call(http, session_id, ("mirror.flip", {"image_index": 0}))
    assert without["images"] == [] and without["text"] == "flipped image 0"
    assert without["image_indices"] == [1]  # the session keeps a tool's picture where it is made
    (with_images,) = call(http, session_id, ("mirror.flip", {"image_index": 0}), images=True)
    (picture,) = with_images["images"]
    assert picture.startswith("data:image/png;base64,") and with_images["image_indices"] == [2]
    np.testing.assert_array_equal(decode_image(picture), IMAGE[:, ::-1])
    (flipped_back,) = call(http, session_id, ("mirror.flip", {"image_index": 2}), images=True)
    np.testing.assert_array_equal(decode_image(flipped_back["images"][0]), IMAGE)
    added = http.post(f"/sessions/{session_id}/images", json={"image": picture})
    assert added.status_code == 201 and added.json() == {"index": 4}


def test_an_unknown_or_closed_session_is_a_404(http: httpx.Client) -> None:
    session_id = open_session(http)
    assert http.delete(f"/sessions/{session_id}").status_code == 204
    for response in (
        http.post(f"/sessions/{session_id}/calls", json=[{"name": "echo.echo", "arguments": {"text": "x"}}]),
        http.post(f"/sessions/{session_id}/images", json={"image": encode_image(IMAGE)}),
        http.delete(f"/sessions/{session_id}"),
        http.post("/sessions/no-such-session/calls", json=[]),
    ):
        assert response.status_code == 404
        assert (
            "is closed, expired or unknown; open a new one with POST /sessions" in response.json()["detail"]
        )


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/sessions", {"seed": 1}, "Field required"),
        ("/sessions", {"images": ["data:image/png;base64,AAAA"]}, "cannot decode the image"),
        ("/sessions", {"images": ["http://example.com/a.png"]}, "not valid base64"),
        ("/sessions", {"images": ["data:image/gif;base64,AAAA"]}, "unsupported image type 'image/gif'"),
        (
            "/sessions",
            {"images": [encode_image(IMAGE)], "attachments": [None, None]},
            "got 1 images but 2 attachments",
        ),
        # A field the API does not have (an attachment is `{"scene": …}` under `attachments`) is named.
        ("/sessions", {"images": [encode_image(IMAGE)], "scenes": ["{}"]}, "Extra inputs are not permitted"),
        ("/sessions/{id}/images", {"image": encode_image(IMAGE), "scene": "{}"}, '"body", "scene"'),
        ("/sessions/{id}/calls", {"name": "echo.echo"}, "Input should be a valid list"),
        ("/sessions/{id}/calls", [{"arguments": {}}], "Field required"),
        ("/sessions/{id}/images", {"image": "data:image/jpeg;base64,!!"}, "not valid base64"),
    ],
)
def test_a_malformed_body_is_a_422_that_says_why(
    http: httpx.Client, path: str, body: Any, message: str
) -> None:
    if "{id}" in path:
        path = path.format(id=open_session(http))
    response = http.post(path, json=body)
    assert response.status_code == 422
    assert message in json.dumps(response.json()["detail"])


def test_a_crashing_tool_is_an_error_result_and_the_server_keeps_serving(http: httpx.Client) -> None:
    session_id = open_session(http)
    crashed, echoed = call(http, session_id, ("fault.crash", {}), ("echo.echo", {"text": "still here"}))
    assert crashed["is_error"] and crashed["text"].startswith("Error: ")
    assert echoed == {
        "text": "still here",
        "is_error": False,
        "variables": [],
        "value": None,
        "images": [],
        "image_indices": [],
    }
    (raised,) = call(http, session_id, ("fault.raise_error", {"message": "boom"}))
    assert raised["is_error"] and raised["text"] == "Error: RuntimeError: boom"
    (recovered,) = call(http, session_id, ("fault.echo", {"text": "back"}))  # on a restarted worker
    assert recovered["text"] == "back" and not recovered["is_error"]
    fault_stats = http.get("/stats").json()["tools"]["fault"]
    assert fault_stats["crashes"] >= 1 and fault_stats["errors"] >= 2


class EchoThenAnswer:
    """Calls echo.echo once, then answers with what the tool said."""

    name = "echo-then-answer"

    async def act(self, state: EpisodeState) -> str:
        if state.turn == 0:
            return (
                '<think>ask</think><tool_call>{"name": "echo.echo", "arguments": {"text": "42"}}</tool_call>'
            )
        tool_reply = state.messages[-1]["content"]
        text = tool_reply if isinstance(tool_reply, str) else json.dumps(tool_reply)
        return f"<think>read it</think><answer>{'42' if '42' in text else 'none'}</answer>"


def test_remote_toolshed_drives_run_episode(base_url: str) -> None:
    async def scenario() -> tuple[Any, dict[str, Any]]:
        async with RemoteToolshed(base_url) as shed:
            open_before = (await shed.fetch_stats())["sessions"]["open"]
            task = Task(id="t1", data_source="test", question="What number?", images=[IMAGE])
            trajectory = await run_episode(EchoThenAnswer(), shed, task)
        async with RemoteToolshed(base_url) as shed:  # the first one released its session on close
            assert (await shed.fetch_stats())["sessions"]["open"] == open_before
        return trajectory, trajectory.stats

    trajectory, stats = asyncio.run(scenario())
    assert trajectory.finish_reason == "answer" and trajectory.answer == "42", trajectory.error
    (record,) = trajectory.tool_calls
    assert record.name == "echo.echo" and record.result_text == "42" and not record.is_error
    assert stats["tool_calls"] == 1 and stats["tool_errors"] == 0


def test_remote_session_mirrors_the_session_api(base_url: str) -> None:
    async def scenario() -> None:
        async with RemoteToolshed(base_url) as shed:
            assert [spec.name for spec in shed.specs()][:2] == ["echo.echo", "echo.describe"]
            session = shed.open_session([IMAGE], seed=3)
            assert session.id is None  # opened on the server by the first call
            made, flipped = await session.call_many(
                [("fault.make_array", {"n": 2}), ("mirror.flip", {"image_index": 0})]
            )
            assert session.id is not None and made.variables == {"array": None}
            assert flipped.image_indices == [1]  # kept by the server session, mirrored here
            np.testing.assert_array_equal(session.images[1], IMAGE[:, ::-1])
            assert session.add_image(IMAGE) == 2  # uploaded before the next call
            described, flipped_back = await session.call_many(
                [("echo.describe", '{"data": "$array"}'), ("mirror.flip", {"image_index": 1})]
            )
            assert described.text == "array of shape (2,), dtype float32, mean 1.0000"
            np.testing.assert_array_equal(flipped_back.images[0], IMAGE)
            unserialisable = await session.call("echo.describe", {"data": np.ones(2)})
            assert unserialisable.is_error and "not JSON serializable" in unserialisable.text
            await session.aclose()
            closed = await session.call("echo.echo", {"text": "x"})
            assert closed.is_error and closed.text == "Error: RuntimeError: the session is closed"
            with pytest.raises(ValueError, match=r"image 0 must be a uint8 RGB array"):
                shed.open_session([IMAGE.astype(np.float32)])

    asyncio.run(scenario())


def test_pictures_of_one_turn_are_mirrored_whatever_order_their_answers_arrive_in(base_url: str) -> None:
    # A turn's calls are separate requests: the server numbers their pictures in the order the tools
    # finished, and the answers may reach the client in the other order.
    first, second = IMAGE[:, ::-1].copy(), IMAGE[::-1].copy()

    async def scenario() -> None:
        async with RemoteToolshed(base_url) as shed:
            session = shed.open_session([IMAGE])
            await session.open()
            later = ToolResult(text="b", images=[second], image_indices=[2])
            earlier = ToolResult(text="a", images=[first], image_indices=[1])
            session._mirror_tool_images([later])
            assert later.image_indices == [2] and len(session.images) == 1  # waits for picture 1
            session._mirror_tool_images([earlier])
            assert earlier.image_indices == [1] and len(session.images) == 3
            np.testing.assert_array_equal(session.images[1], first)
            np.testing.assert_array_equal(session.images[2], second)
            assert session.add_image(IMAGE) == 3  # after the tools' pictures: no index is taken twice

    asyncio.run(scenario())


def test_a_session_closed_outside_an_event_loop_is_released(base_url: str) -> None:
    async def opened() -> RemoteSession:
        async with RemoteToolshed(base_url) as shed:
            session = shed.open_session([IMAGE])
            await session.open()
            return session

    session = asyncio.run(opened())
    session.close()
    assert (
        session.closed and httpx.post(f"{base_url}/sessions/{session.id}/calls", json=[]).status_code == 404
    )


def test_calls_become_error_results_when_the_server_is_gone() -> None:
    async def scenario() -> list[ToolResult]:
        with contextlib.ExitStack() as server:
            url = server.enter_context(
                serving(Toolshed([ToolDeployment(tool=EchoTool, backend="inprocess")]))
            )
            async with RemoteToolshed(url, timeout_s=5) as shed:
                session = shed.open_session([IMAGE])
                first = await session.call("echo.echo", {"text": "up"})
                await asyncio.to_thread(server.close)  # stops the server
                return [first, *await session.call_many([("echo.echo", {"text": "down"})] * 2)]

    first, *down = asyncio.run(scenario())
    assert first.text == "up" and not first.is_error
    for result in down:
        assert result.is_error and result.text.startswith("Error: ConnectionError: ")


def test_start_fails_clearly_when_no_server_listens() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago, now closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConnectionError, match=rf"cannot use the Toolshed server at http://127.0.0.1:{port}"):
        asyncio.run(RemoteToolshed(f"http://127.0.0.1:{port}").start())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [(["--toolset", "v9"], "unknown toolset 'v9'"), (["--profile", "perfect"], "unknown profile 'perfect'")],
)
def test_serve_rejects_an_unknown_toolset_or_profile(arguments: list[str], message: str) -> None:
    app = typer.Typer()
    app.command()(serve)
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.slow
def test_serve_runs_the_v1_tools_with_the_same_results_as_in_process() -> None:
    from spacetools.bench.evaluate import episode_input
    from spacetools.bench.spatialsim.generator import generate

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = "import typer; from spacetools.cli.serve import serve; typer.run(serve)"
    server = subprocess.Popen(
        [sys.executable, "-c", command, "--port", str(port), "--profile", "realistic", "--seed", "5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.communicate()[1].decode()[-2000:]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            assert time.monotonic() < deadline, "spacetools serve did not come up"
            time.sleep(0.2)
        assert httpx.get(f"{url}/health").json()["profile"] == "realistic"  # set on the deployments
        (sample,) = generate(1, seed=0, families=["bopgrasp"], workers=1)["bopgrasp"]
        task = episode_input(sample, "bopgrasp/0")  # the scene travels to the tools only

        async def both() -> list[Any]:
            async with (
                RemoteToolshed(url) as remote,
                Toolshed(with_profile("v1", "realistic"), seed=5) as local,
            ):
                return [await run_episode(ScriptedPolicy(), shed, task, seed=2) for shed in (remote, local)]

        remote, local = asyncio.run(both())
    finally:
        server.terminate()
        # SIGTERM shuts down cleanly: the lifespan closes the Toolshed and its worker processes (uvicorn
        # then re-raises the signal, so the exit status is -SIGTERM).
        log = server.communicate(timeout=60)[1].decode()
        assert "Application shutdown complete" in log, log[-2000:]
    assert [call.result_text for call in remote.tool_calls] == [call.result_text for call in local.tool_calls]
    assert [call.name for call in remote.tool_calls][-1] == "grasp_generator.compute_grasp"
    assert remote.finish_reason == "answer" and remote.answer == local.answer, remote.error
    # The grasp tool's geometry declaration reached the client with its spec.
    assert [call.geometry for call in remote.tool_calls] == [call.geometry for call in local.tool_calls]
    assert remote.tool_calls[-1].geometry == {"points_2d": "grasp"}
