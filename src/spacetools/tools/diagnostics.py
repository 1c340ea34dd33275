"""Diagnostic tools for tests and benchmarks of the Toolshed: echo, sleep and injected faults."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import time
from typing import Any

import numpy as np

from spacetools.kit.definition import Tool, ToolContext, ToolError, ToolResult, tool_method

__all__ = ["EchoTool", "FaultTool", "SleepTool"]


def _in_ray_actor() -> bool:
    """True inside a Ray actor (its own worker process, started by Ray rather than multiprocessing)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


class EchoTool(Tool):
    """Returns what it is given: the cheapest possible tool call."""

    name = "echo"

    @tool_method
    def echo(self, text: str) -> ToolResult:
        """Return the text unchanged.

        Args:
            text: The text to send back.
        """
        return ToolResult(text=text)

    @tool_method
    def describe(self, data: np.ndarray) -> ToolResult:
        """Describe an array: its shape, dtype and mean.

        Args:
            data: The array to describe.
        """
        return ToolResult(
            text=f"array of shape {data.shape}, dtype {data.dtype}, mean {float(data.mean()):.4f}"
        )

    @tool_method
    def random(self, *, ctx: ToolContext) -> ToolResult:
        """Draw a number from the call's seeded random generator."""
        return ToolResult(text=f"{ctx.rng.random():.12f}")


class SleepTool(Tool):
    """A tool with a fixed latency, for throughput measurements: its plain methods run on an instance's
    thread or worker, its async ones (`noop_async`, `sleep_async`) on the in-process server's event loop."""

    name = "sleep"

    @tool_method
    def sleep(self, seconds: float) -> ToolResult:
        """Sleep, then report how long.

        Args:
            seconds: How long to sleep, in seconds (0 to 60).
        """
        if not 0 <= seconds <= 60:
            raise ToolError(f"seconds must be between 0 and 60 (got {seconds})")
        time.sleep(seconds)
        return ToolResult(text=f"slept {seconds:g} s")

    @tool_method
    def noop(self) -> ToolResult:
        """Do nothing."""
        return ToolResult(text="ok")

    @tool_method
    async def sleep_async(self, seconds: float) -> ToolResult:
        """Sleep without blocking (an async method), then report how long.

        Args:
            seconds: How long to sleep, in seconds (0 to 60).
        """
        if not 0 <= seconds <= 60:
            raise ToolError(f"seconds must be between 0 and 60 (got {seconds})")
        await asyncio.sleep(seconds)
        return ToolResult(text=f"slept {seconds:g} s")

    @tool_method
    async def noop_async(self) -> ToolResult:
        """Do nothing (an async method)."""
        return ToolResult(text="ok")

    def batch_sleep(
        self, calls: list[dict[str, Any]], contexts: list[ToolContext]
    ) -> list[ToolResult | Exception]:
        """A batch costs as long as its longest call, as one forward pass of a model on a batch does."""
        results: list[ToolResult | Exception] = []
        longest = 0.0
        for call in calls:
            seconds = call["seconds"]
            if 0 <= seconds <= 60:
                longest = max(longest, seconds)
                results.append(ToolResult(text=f"slept {seconds:g} s"))
            else:
                results.append(ToolError(f"seconds must be between 0 and 60 (got {seconds})"))
        time.sleep(longest)
        return results


class FaultTool(EchoTool):
    """Injects the failures the Toolshed must survive: crashes, hangs, exceptions, large outputs.

    It keeps `EchoTool`'s methods as the healthy path of a faulty tool.
    """

    name = "fault"

    def setup(self) -> None:
        """Fail like a tool whose weights are missing when configured with `setup_error`."""
        if "setup_error" in self.config:
            raise OSError(self.config["setup_error"])

    @tool_method
    def crash(self, exit_code: int = 3) -> ToolResult:
        """Kill the worker process that runs this call, without cleanup.

        Args:
            exit_code: The process exit code.
        """
        # os._exit in the server process would take the whole Toolshed down, not one instance.
        if multiprocessing.parent_process() is None and not _in_ray_actor():
            raise ToolError("fault.crash only runs in a worker process (deploy with backend='process')")
        os._exit(exit_code)

    @tool_method
    def hang(self, seconds: float = 3600.0) -> ToolResult:
        """Block for a long time, as a deadlocked tool would.

        Args:
            seconds: How long to block.
        """
        time.sleep(seconds)
        return ToolResult(text=f"woke up after {seconds:g} s")

    @tool_method
    def raise_error(self, message: str) -> ToolResult:
        """Raise a RuntimeError with the given message.

        Args:
            message: The exception message.
        """
        raise RuntimeError(message)

    @tool_method
    def context(self, *, ctx: ToolContext) -> ToolResult:
        """Report what the call's context holds: each image's size and its attachment's keys."""
        return ToolResult(
            text="; ".join(
                f"{height}x{width} {sorted(ctx.attachment(index))}"
                for index, (height, width) in enumerate(ctx.image_sizes)
            )
            or "no images"
        )

    @tool_method
    def make_array(self, n: int) -> ToolResult:
        """Create a float32 array of n ones and store it as $array.

        Args:
            n: Number of elements (0 to 100 million).
        """
        if not 0 <= n <= 100_000_000:
            raise ToolError(f"n must be between 0 and 100000000 (got {n})")
        return ToolResult(
            text=f"Created an array of {n} float32 values. Use $array to reference it.",
            variables={"array": np.ones(n, dtype=np.float32)},
        )
