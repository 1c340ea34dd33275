"""Dynamic batching in detail: how calls are grouped, and errors kept per call whatever the batch does."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from spacetools.kit.definition import Tool, ToolContext, ToolError, ToolResult, tool_method
from spacetools.toolshed import ToolDeployment, Toolshed


class SquareTool(Tool):
    """Squares numbers; its batched method records the batch sizes and fails on a poisoned batch."""

    name = "square"
    batch_sizes: ClassVar[list[int]] = []

    @tool_method
    def square(self, x: int) -> ToolResult:
        """Square a number.

        Args:
            x: The number (13 is refused).
        """
        if x == 13:
            raise ToolError("13 is unlucky")
        return ToolResult(text=str(x * x))

    def batch_square(self, calls: list[dict[str, Any]], contexts: list[ToolContext]) -> list[Any]:
        type(self).batch_sizes.append(len(calls))
        if any(call["x"] < 0 for call in calls):
            raise ValueError("a negative number breaks the whole batch")
        return [ToolError("13 is unlucky") if call["x"] == 13 else str(call["x"] ** 2) for call in calls]


def _run(numbers: list[int], batch_size: int = 4) -> tuple[list[str], dict[str, Any]]:
    SquareTool.batch_sizes = []

    async def scenario() -> tuple[list[str], dict[str, Any]]:
        deployment = ToolDeployment(
            tool=SquareTool, backend="inprocess", batch_size=batch_size, batch_window_ms=100
        )
        async with Toolshed([deployment]) as shed:
            session = shed.open_session([])
            results = await session.call_many([("square.square", {"x": x}) for x in numbers])
            return [r.text for r in results], shed.stats()["tools"]["square"]["batching"][0]

    return asyncio.run(scenario())


def test_concurrent_calls_fill_batches_in_order_and_the_rest_leaves_after_the_window() -> None:
    texts, batching = _run([1, 2, 3, 4, 5, 6])
    assert texts == ["1", "4", "9", "16", "25", "36"]
    assert SquareTool.batch_sizes == [4, 2]
    assert batching == {
        "method": "square.square",
        "batch_size": 4,
        "batches": 2,
        "calls": 6,
        "mean_batch": 3.0,
    }


def test_an_error_output_stays_with_its_call() -> None:
    texts, _ = _run([2, 13, 3])
    assert texts == ["4", "Error: 13 is unlucky", "9"]


def test_a_batch_that_raises_is_run_call_by_call() -> None:
    texts, _ = _run([2, -1, 13, 3])
    assert SquareTool.batch_sizes == [4]
    assert texts == ["4", "1", "Error: 13 is unlucky", "9"]


def test_invalid_arguments_never_reach_the_batch() -> None:
    texts, batching = _run([2, "x", 3])  # type: ignore[list-item]
    assert texts[1].startswith(
        "Error: invalid arguments for square.square: x: Input should be a valid integer"
    )
    assert texts[::2] == ["4", "9"] and batching["calls"] == 2
