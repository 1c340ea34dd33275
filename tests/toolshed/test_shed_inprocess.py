"""The Toolshed with in-process instances: the call path, errors as results, parallelism, seeds, stats."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import numpy as np
import pytest

from spacetools.kit.definition import Tool, ToolContext, ToolResult, tool_method
from spacetools.tools.diagnostics import EchoTool, FaultTool, SleepTool
from spacetools.toolshed import ToolDeployment, ToolProvider, ToolSession, Toolshed

T = TypeVar("T")
IMAGE = np.zeros((8, 8, 3), np.uint8)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def _deployments(timeout_s: float = 5.0) -> list[ToolDeployment]:
    return [
        ToolDeployment(tool=EchoTool, backend="inprocess"),
        ToolDeployment(tool=SleepTool, backend="inprocess", instances=4, timeout_s=timeout_s),
        ToolDeployment(tool=FaultTool, backend="inprocess", timeout_s=timeout_s),
    ]


def test_calls_resolve_variables_and_store_results() -> None:
    async def scenario() -> None:
        async with Toolshed(_deployments()) as shed:
            session = shed.open_session([IMAGE])
            made = await session.call("fault.make_array", {"n": 5})
            assert not made.is_error and "array" in session.variables
            described = await session.call("echo.describe", '{"data": "$array"}')
            assert described.text == "array of shape (5,), dtype float32, mean 1.0000"
            by_value = await session.call("echo.describe", {"data": [[1, 2], [3, 4]]})
            assert by_value.text == "array of shape (2, 2), dtype int64, mean 2.5000"

    run(scenario())


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("echo.echoo", {}, "Error: unknown tool 'echo.echoo'. Did you mean 'echo.echo'? Available tools: "),
        ("echo.echo", {}, "Error: invalid arguments for echo.echo: text: missing required argument"),
        (
            "echo.echo",
            {"text": 1},
            "Error: invalid arguments for echo.echo: text: Input should be a valid string",
        ),
        ("echo.echo", "{text: 1}", "Error: the arguments for echo.echo are not valid JSON: "),
        ("echo.echo", "[1]", "Error: the arguments for echo.echo must be a JSON object, got list"),
        ("echo.describe", {"data": "$depth"}, "Error: unknown variable $depth. No variables are stored yet."),
        ("fault.raise_error", {"message": "bad /srv/x/y.py"}, "Error: RuntimeError: bad y.py"),
        ("fault.crash", {}, "Error: fault.crash only runs in a worker process"),
        ("sleep.sleep", {"seconds": -1}, "Error: seconds must be between 0 and 60 (got -1.0)"),
    ],
)
def test_failures_are_error_results_with_clear_text(name: str, arguments: Any, expected: str) -> None:
    async def scenario() -> None:
        async with Toolshed(_deployments()) as shed:
            result = await shed.open_session([IMAGE]).call(name, arguments)
            assert result.is_error
            assert result.text.startswith(expected), result.text

    run(scenario())


def test_calls_of_one_turn_run_in_parallel_and_keep_their_order() -> None:
    async def scenario() -> None:
        async with Toolshed(_deployments()) as shed:
            session = shed.open_session([])
            started = time.perf_counter()
            results = await session.call_many(
                [("sleep.sleep", {"seconds": 0.3 + i / 100}) for i in range(4)]
                + [("echo.echo", {"text": "z"})]
            )
            elapsed = time.perf_counter() - started
            assert [r.text for r in results] == [
                "slept 0.3 s",
                "slept 0.31 s",
                "slept 0.32 s",
                "slept 0.33 s",
                "z",
            ]
            assert elapsed < 0.9  # serial would take 1.26 s
            stats = shed.stats()["tools"]["sleep"]
            assert stats["calls"] == 4 and stats["busy"] == 0 and stats["queue_depth"] == 0

    run(scenario())


def test_a_hanging_in_process_tool_times_out_and_its_instance_is_replaced() -> None:
    async def scenario() -> None:
        async with Toolshed(_deployments(timeout_s=0.3)) as shed:
            session = shed.open_session([])
            result = await session.call("fault.hang", {"seconds": 30})
            assert result.is_error
            assert result.text == "Error: TimeoutError: fault.hang did not finish within 0.3 s"
            assert (await session.call("fault.echo", {"text": "alive"})).text == "alive"
            stats = shed.stats()["tools"]["fault"]
            assert stats["timeouts"] == 1 and stats["restarts"] == 1 and stats["errors"] == 1

    run(scenario())


def test_random_streams_are_reproducible_and_depend_on_the_call() -> None:
    async def draws(seed: int) -> list[str]:
        async with Toolshed(_deployments(), seed=seed) as shed:
            first, second = shed.open_session([], seed=1), shed.open_session([], seed=2)
            results = await asyncio.gather(first.call("echo.random"), second.call("echo.random", "{}"))
            return [r.text for r in results]

    a, b, c = run(draws(0)), run(draws(0)), run(draws(1))
    assert a == b
    assert a[0] != a[1] and a != c


def test_a_repeated_call_draws_new_noise_reproducibly() -> None:
    async def draws() -> list[str]:
        async with Toolshed(_deployments(), seed=0) as shed:
            session = shed.open_session([], seed=1)
            return [(await session.call("echo.random")).text for _ in range(3)]

    first, again = run(draws()), run(draws())
    assert first == again  # the same session history gives the same results
    assert len(set(first)) == 3  # but a retry is not a replay of the failed call


def test_closed_sessions_and_bad_images_are_reported() -> None:
    async def scenario() -> None:
        async with Toolshed(_deployments()) as shed:
            session = shed.open_session([IMAGE])
            assert session.add_image(IMAGE, {"scene": '{"seed": 3}'}) == 1
            assert session.attachments == [{}, {"scene": '{"seed": 3}'}]
            with pytest.raises(ValueError, match=r"image 2 must be a uint8 RGB array of shape \(H, W, 3\)"):
                session.add_image(np.zeros((8, 8), np.float32))
            session.close()
            result = await session.call("echo.echo", {"text": "x"})
            assert result.is_error and "closed or expired" in result.text
            assert shed.stats()["sessions"]["open"] == 0

    run(scenario())


def test_oversized_result_variable_is_flagged_in_the_result_text() -> None:
    async def scenario() -> None:
        async with Toolshed(_deployments(), max_session_bytes=1000) as shed:
            session = shed.open_session([])
            result = await session.call("fault.make_array", {"n": 1000})
            assert result.text.endswith("(Note: $array could not be kept within the session memory limit.)")
            again = await session.call("echo.describe", {"data": "$array"})
            assert again.text.startswith("Error: variable $array was evicted to stay within the memory limit")

    run(scenario())


def test_memory_stays_bounded_over_500_sessions_through_the_toolshed() -> None:
    async def scenario() -> None:
        async with Toolshed(_deployments(), max_total_bytes=2_000_000) as shed:
            for index in range(500):
                session = shed.open_session([], seed=index)
                await session.call("fault.make_array", {"n": 25_000})  # 100 kB each, 50 MB in all
                if index % 3 == 0:
                    session.close()
                assert shed.stats()["sessions"]["variable_bytes"] <= 2_000_000
            assert shed.stats()["sessions"]["open"] == 333

    run(scenario())


def test_unknown_toolset_and_duplicate_tools_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown toolset 'nope'; choose one of: v1"):
        Toolshed("nope")
    with pytest.raises(ValueError, match="tool 'echo' is deployed twice"):
        Toolshed(
            [ToolDeployment(tool=EchoTool), ToolDeployment(tool="spacetools.tools.diagnostics:EchoTool")]
        )
    with pytest.raises(ValueError, match="cannot import tool"):
        ToolDeployment(tool="spacetools.tools.diagnostics:Missing").tool_class()


def test_calling_before_start_is_a_programming_error() -> None:
    session = Toolshed(_deployments()).open_session([])
    with pytest.raises(RuntimeError, match="not started"):
        run(session.call("echo.echo", {"text": "x"}))


def test_toolshed_and_session_satisfy_the_provider_protocol() -> None:
    shed = Toolshed(_deployments())
    assert isinstance(shed, ToolProvider)
    assert isinstance(shed.open_session([IMAGE]), ToolSession)


def test_tool_pictures_are_kept_by_the_session_and_calls_get_only_their_images() -> None:
    class Picture(Tool):
        name = "picture"

        @tool_method
        def copy(self, image_index: int, *, ctx: ToolContext) -> ToolResult:
            """Return a copy of one image, and say which images the call was sent.

            Args:
                image_index: The image to copy.
            """
            sent = sorted(ctx.images)
            return ToolResult(
                text=f"sent {sent} of {ctx.image_count}", images=[ctx.image(image_index).copy()]
            )

    async def scenario() -> None:
        async with Toolshed([ToolDeployment(tool=Picture, backend="inprocess")]) as shed:
            session = shed.open_session([IMAGE, IMAGE[::-1].copy()], [{"note": "a"}, None])
            first = await session.call("picture.copy", {"image_index": 1})
            assert first.text == "sent [1] of 2" and first.image_indices == [2]
            second = await session.call("picture.copy", {"image_index": 2})
            assert second.text == "sent [2] of 3" and second.image_indices == [3]
            assert len(session.images) == 4 and session.attachments == [{"note": "a"}, {}, {}, {}]
            np.testing.assert_array_equal(session.images[3], IMAGE[::-1])

    run(scenario())


class LoopTool(Tool):
    """Async methods beside a plain one; each call tells the thread it ran on."""

    name = "loop"

    @tool_method
    async def where(self) -> ToolResult:
        """The thread this async method runs on."""
        await asyncio.sleep(0)
        return ToolResult(text="async", value=threading.get_ident())

    @tool_method
    def where_sync(self) -> ToolResult:
        """The thread this plain method runs on."""
        return ToolResult(text="sync", value=threading.get_ident())

    @tool_method
    async def fail(self, message: str) -> ToolResult:
        """Raise a RuntimeError.

        Args:
            message: The exception message.
        """
        await asyncio.sleep(0)
        raise RuntimeError(message)

    @tool_method
    async def wrong_type(self) -> ToolResult:
        """Return a list instead of a result."""
        return []  # type: ignore[return-value]


def test_async_methods_run_on_the_event_loop_and_plain_ones_on_the_instance_thread() -> None:
    async def scenario() -> None:
        async with Toolshed([ToolDeployment(tool=LoopTool, backend="inprocess")]) as shed:
            session = shed.open_session([])
            on_loop, on_thread = await session.call_many([("loop.where", {}), ("loop.where_sync", {})])
            assert on_loop.text == "async" and on_loop.value == threading.get_ident()
            assert on_thread.text == "sync" and on_thread.value not in (None, threading.get_ident())

    run(scenario())


def test_async_errors_and_wrong_results_are_error_results_and_the_instance_stays() -> None:
    async def scenario() -> None:
        async with Toolshed([ToolDeployment(tool=LoopTool, backend="inprocess")]) as shed:
            session = shed.open_session([])
            failed = await session.call("loop.fail", {"message": "boom in /srv/tools/x.py"})
            assert failed.is_error and failed.text == "Error: RuntimeError: boom in x.py"
            wrong = await session.call("loop.wrong_type")
            assert wrong.is_error
            assert wrong.text == "Error: TypeError: loop.wrong_type returned list, expected ToolResult or str"
            assert not (await session.call("loop.where")).is_error
            stats = shed.stats()["tools"]["loop"]
            assert stats["errors"] == 2 and stats["restarts"] == 0 and stats["crashes"] == 0

    run(scenario())


def test_an_async_call_past_its_timeout_is_cancelled_and_its_instance_replaced() -> None:
    async def scenario() -> None:
        deployment = ToolDeployment(tool=SleepTool, backend="inprocess", timeout_s=0.3)
        async with Toolshed([deployment]) as shed:
            session = shed.open_session([])
            result = await session.call("sleep.sleep_async", {"seconds": 30})
            assert result.text == "Error: TimeoutError: sleep.sleep_async did not finish within 0.3 s"
            assert (await session.call("sleep.noop_async")).text == "ok"  # on the new instance
            assert (await session.call("sleep.noop")).text == "ok"
            stats = shed.stats()["tools"]["sleep"]
            assert stats["timeouts"] == 1 and stats["restarts"] == 1 and stats["errors"] == 1

    run(scenario())
