"""The tool definition: schemas from hints and docstrings, validation, results and error sanitizing."""

from __future__ import annotations

import asyncio
import json
import pickle
import threading
from typing import Annotated, Literal

import numpy as np
import pytest
from pydantic import Field

from spacetools.kit.definition import (
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    Variable,
    hermes_tools_block,
    invoke_tool_method,
    invoke_tool_method_async,
    sanitize_error_text,
    tool_method,
    tool_methods,
    tool_specs,
)
from spacetools.tools.diagnostics import EchoTool


class PointTool(Tool):
    name = "sam2"

    @tool_method
    def segment_from_point(
        self,
        x: float,
        y: float,
        image_index: int = 0,
        mode: Literal["fast", "fine"] = "fast",
        points: list[tuple[float, float]] | None = None,
        *,
        ctx: ToolContext,
    ) -> ToolResult:
        """Segment the object at a point.

        The mask is stored as $segmentation_mask.

        Args:
            x: Normalized x coordinate.
            y: Normalized y coordinate.
            image_index: Index of the image in the conversation.
            mode: Speed or quality.
            points: Extra prompt points.
        """
        height, width = ctx.image(image_index).shape[:2]
        return ToolResult(text=f"{x} {y} {mode} {points} {width}x{height}")

    @tool_method(geometry={"corners_2d": "corners"})
    def compute_bbox(self, point_cloud: np.ndarray, focal_length_px: Variable[float]) -> str:
        """Fit a box to a point cloud.

        Args:
            point_cloud: The points, Nx3.
            focal_length_px: Focal length in pixels.
        """
        return f"{point_cloud.shape} {focal_length_px}"

    def helper(self) -> None:
        """Not a tool method."""


def _ctx(images: int = 1, attachments: list[dict] | None = None) -> ToolContext:
    frames = {index: np.zeros((4, 6, 3), np.uint8) for index in range(images)}
    return ToolContext(
        "s",
        frames,
        [(4, 6)] * images,
        attachments if attachments is not None else [{}] * images,
        np.random.default_rng(0),
    )


def test_schema_from_hints_and_docstring() -> None:
    spec = {s.name: s for s in tool_specs(PointTool)}["sam2.segment_from_point"]
    assert spec.description == "Segment the object at a point.\n\nThe mask is stored as $segmentation_mask."
    props = spec.parameters["properties"]
    assert props["x"] == {"type": "number", "description": "Normalized x coordinate."}
    assert props["image_index"]["type"] == "integer"
    assert props["mode"] == {"type": "string", "enum": ["fast", "fine"], "description": "Speed or quality."}
    assert props["points"]["type"] == "array"
    assert props["points"]["items"]["prefixItems"] == [{"type": "number"}, {"type": "number"}]
    assert "ctx" not in props
    assert spec.parameters["required"] == ["x", "y"]


def test_array_and_variable_parameters_are_references() -> None:
    spec = {s.name: s for s in tool_specs(PointTool)}["sam2.compute_bbox"]
    props = spec.parameters["properties"]
    assert props["point_cloud"]["type"] == "string"
    assert '"$name"' in props["point_cloud"]["description"]
    assert props["focal_length_px"]["anyOf"] == [{"type": "number"}, {"type": "string"}]


def test_openai_and_hermes_formats() -> None:
    specs = tool_specs(PointTool)
    block = hermes_tools_block(specs)
    lines = block.split("\n")
    assert lines[0] == "<tools>" and lines[-1] == "</tools>" and len(lines) == 2 + len(specs)
    for line, spec in zip(lines[1:-1], specs, strict=True):
        parsed = json.loads(line)
        assert parsed == spec.to_openai()
        assert parsed["type"] == "function"
        assert set(parsed["function"]) == {"name", "description", "parameters"}


def test_a_geometry_declaration_is_carried_by_the_spec_and_not_shown_to_the_model() -> None:
    bbox, segment = tool_specs(PointTool)[1], tool_specs(PointTool)[0]
    assert bbox.geometry == {"corners_2d": "corners"} and segment.geometry == {}
    assert "geometry" not in json.dumps(bbox.to_openai())
    with pytest.raises(
        ValueError, match="unknown geometry kinds \\['box'\\]; choose from points, corners, grasp"
    ):
        tool_method(geometry={"corners": "box"})


def test_validation_accepts_ints_for_floats_and_lists_for_tuples() -> None:
    method = tool_methods(PointTool)["sam2.segment_from_point"]
    kwargs = method.validate({"x": 1, "y": 0.5, "points": [[0.1, 0.2]]})
    assert kwargs == {"x": 1.0, "y": 0.5, "image_index": 0, "mode": "fast", "points": [(0.1, 0.2)]}
    assert isinstance(kwargs["x"], float)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"x": "left", "y": 0.5}, "x: Input should be a valid number (got 'left')"),
        ({"x": 0.5}, "y: missing required argument"),
        ({"x": 0.5, "y": 0.5, "z": 1}, "z: unexpected argument (expected: x, y, image_index, mode, points)"),
        ({"x": 0.5, "y": 0.5, "mode": "slow"}, "mode: Input should be 'fast' or 'fine'"),
        ({"x": 0.5, "y": 0.5, "image_index": 1.5}, "image_index: Input should be a valid integer"),
    ],
)
def test_validation_errors_name_tool_argument_and_expectation(arguments: dict, expected: str) -> None:
    method = tool_methods(PointTool)["sam2.segment_from_point"]
    with pytest.raises(ToolError) as info:
        method.validate(arguments)
    assert str(info.value).startswith("invalid arguments for sam2.segment_from_point: ")
    assert expected in str(info.value)


def test_array_parameter_takes_arrays_or_numeric_lists_but_not_plain_strings() -> None:
    method = tool_methods(PointTool)["sam2.compute_bbox"]
    kwargs = method.validate({"point_cloud": [[0, 0, 1], [1, 1, 2]], "focal_length_px": 500})
    assert kwargs["point_cloud"].shape == (2, 3)
    with pytest.raises(ToolError, match=r'point_cloud: .*"\$name" reference'):
        method.validate({"point_cloud": "point_cloud", "focal_length_px": 500.0})
    with pytest.raises(ToolError, match=r"point_cloud: .*ragged"):
        method.validate({"point_cloud": [[0, 0, 1], [1]], "focal_length_px": 500.0})


def test_invoke_injects_context_and_wraps_string_results() -> None:
    tool = PointTool()
    result = invoke_tool_method(tool, "sam2.segment_from_point", {"x": 0.5, "y": 0.25}, _ctx())
    assert result == ToolResult(text="0.5 0.25 fast None 6x4")
    cloud = np.zeros((7, 3))
    assert invoke_tool_method(
        tool, "sam2.compute_bbox", {"point_cloud": cloud, "focal_length_px": 2.0}, _ctx()
    ).text == ("(7, 3) 2.0")


def test_tool_errors_become_error_results() -> None:
    result = invoke_tool_method(
        PointTool(), "sam2.segment_from_point", {"x": 0.5, "y": 0.5, "image_index": 3}, _ctx(2)
    )
    assert result.is_error
    assert result.text == (
        "Error: image_index 3 is out of range: the conversation has 2 image(s) (valid indices: 0..1)"
    )


def test_attachments_are_per_image_and_images_only_those_sent() -> None:
    ctx = _ctx(2, attachments=[{"scene": '{"seed": 1}'}, {}])
    assert ctx.attachment(0) == {"scene": '{"seed": 1}'} and ctx.attachment(1) == {}
    del ctx.images[1]  # a call that references only image 0 is sent only image 0
    assert ctx.image_size(1) == (4, 6)
    with pytest.raises(ToolError, match="image 1 was not sent with this call"):
        ctx.image(1)
    with pytest.raises(ToolError, match="out of range"):
        ctx.attachment(2)


def test_sanitize_strips_tracebacks_paths_and_caps_length() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/project/tool.py", line 3, in run\n'
        "ValueError: cannot open /data/models/weights.bin"
    )
    assert sanitize_error_text(text) == "ValueError: cannot open weights.bin"
    assert len(sanitize_error_text("x" * 2000)) == 500


class Undocumented(Tool):
    name = "bad"

    @tool_method
    def run(self, x: int) -> str:
        """Run."""
        return str(x)


class Unnamed(Tool):
    @tool_method
    def run(self) -> str:
        """Run."""
        return ""


def test_definition_mistakes_are_reported_with_the_method_named() -> None:
    with pytest.raises(TypeError, match=r"bad\.run: argument x is not described"):
        tool_specs(Undocumented)
    with pytest.raises(TypeError, match="Unnamed must set `name`"):
        tool_specs(Unnamed)


def test_context_pickles_with_its_random_stream_intact() -> None:
    ctx = _ctx(attachments=[{"scene": '{"seed": 1}'}])
    ctx.rng.random()  # an advanced stream must continue where it was, not restart
    copy = pickle.loads(pickle.dumps(ctx))
    assert copy.rng.random() == ctx.rng.random()
    assert copy.session_id == ctx.session_id and copy.attachment(0) == {"scene": '{"seed": 1}'}
    assert np.array_equal(copy.image(0), ctx.image(0))


def test_a_caller_reshaping_an_openai_schema_does_not_change_the_cached_spec() -> None:
    (spec, *_) = tool_specs(EchoTool)
    schema = spec.to_openai()
    schema["function"]["parameters"]["properties"].clear()
    assert spec.to_openai()["function"]["parameters"]["properties"]


class ConstrainedTool(Tool):
    name = "scale"

    @tool_method
    def resize(self, factor: Annotated[float, Field(gt=0, le=4)], data: str | np.ndarray) -> str:
        """Resize data.

        Args:
            factor: How much larger.
            data: The array, or a note.
        """
        return f"{factor} {type(data).__name__}"


def test_pydantic_constraints_in_hints_are_validated_and_shown_in_the_schema() -> None:
    method = tool_methods(ConstrainedTool)["scale.resize"]
    props = method.spec.parameters["properties"]
    assert props["factor"] == {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 4,
        "description": "How much larger.",
    }
    assert method.validate({"factor": 2, "data": "x"}) == {"factor": 2.0, "data": "x"}
    with pytest.raises(ToolError, match=r"factor: Input should be greater than 0 \(got -1\.0\)"):
        method.validate({"factor": -1.0, "data": "x"})


def test_array_or_string_argument_is_one_string_schema_and_takes_both() -> None:
    method = tool_methods(ConstrainedTool)["scale.resize"]
    assert method.spec.parameters["properties"]["data"] == {
        "type": "string",
        "description": 'The array, or a note (a "$name" reference to a variable from an earlier tool call).',
    }
    assert isinstance(method.validate({"factor": 1, "data": [[1, 2], [3, 4]]})["data"], np.ndarray)
    assert method.validate({"factor": 1, "data": "note"})["data"] == "note"


class Opaque:
    pass


class UndescribableTool(Tool):
    name = "opaque"

    @tool_method
    def run(self, thing: Opaque) -> str:
        """Run.

        Args:
            thing: Something no JSON schema can describe.
        """
        return ""


def test_an_argument_type_without_a_json_schema_is_a_definition_mistake() -> None:
    with pytest.raises(TypeError, match=r"opaque\.run\(thing\): cannot describe .*Opaque"):
        tool_specs(UndescribableTool)


class AsyncTool(Tool):
    """Async and plain methods side by side; each call records the thread it ran on."""

    name = "aio"

    def setup(self) -> None:
        self.threads: list[int] = []

    @tool_method
    async def double(self, x: int, *, ctx: ToolContext) -> ToolResult:
        """Double a number after yielding to the event loop.

        Args:
            x: The number.
        """
        await asyncio.sleep(0)
        self.threads.append(threading.get_ident())
        return ToolResult(text=str(2 * x), value=ctx.session_id)

    @tool_method
    async def text(self) -> str:
        """Answer a plain text."""
        return "plain"

    @tool_method
    async def fail(self, message: str) -> ToolResult:
        """Raise a ToolError after yielding to the event loop.

        Args:
            message: The error message.
        """
        await asyncio.sleep(0)
        raise ToolError(message)

    @tool_method
    async def wrong_type(self) -> ToolResult:
        """Return a number instead of a result."""
        return 3  # type: ignore[return-value]

    @tool_method
    async def wait(self, seconds: float) -> ToolResult:
        """Sleep on the event loop.

        Args:
            seconds: How long.
        """
        await asyncio.sleep(seconds)
        return ToolResult(text="woke")

    @tool_method
    async def cancel_itself(self) -> ToolResult:
        """Cancel its own task."""
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)
        return ToolResult(text="not cancelled")

    @tool_method
    def plain(self) -> ToolResult:
        """A plain method, for the async entry point."""
        self.threads.append(threading.get_ident())
        return ToolResult(text="sync")


def _async_tool() -> AsyncTool:
    tool = AsyncTool()
    tool.setup()
    return tool


def test_async_methods_are_marked_and_described_like_plain_ones() -> None:
    methods = tool_methods(AsyncTool)
    assert {name for name, method in methods.items() if method.is_async} == {
        "aio.double",
        "aio.text",
        "aio.fail",
        "aio.wrong_type",
        "aio.wait",
        "aio.cancel_itself",
    }
    assert not methods["aio.plain"].is_async and not tool_methods(EchoTool)["echo.echo"].is_async
    assert methods["aio.double"].spec.parameters["required"] == ["x"] and methods["aio.double"].wants_context


def test_the_sync_entry_point_runs_async_methods_to_completion_with_the_same_results() -> None:
    tool = _async_tool()
    ctx = _ctx()
    assert invoke_tool_method(tool, "aio.double", {"x": 4}, ctx) == ToolResult(text="8", value="s")
    assert invoke_tool_method(tool, "aio.text", {}, ctx) == ToolResult(text="plain")
    assert invoke_tool_method(tool, "aio.fail", {"message": "no luck"}, ctx) == ToolResult(
        text="Error: no luck", is_error=True
    )
    assert invoke_tool_method(tool, "aio.wrong_type", {}, ctx).text == (
        "Error: TypeError: aio.wrong_type returned int, expected ToolResult or str"
    )
    # A tool that cancels its own call gets an error result: nobody else cancels a call run this way.
    assert invoke_tool_method(tool, "aio.cancel_itself", {}, ctx).text == (
        "Error: RuntimeError: aio.cancel_itself was cancelled"
    )
    # From other threads too (a worker's, an actor's): each runs them on a loop of its own.
    outcomes: list[ToolResult] = []
    worker = threading.Thread(
        target=lambda: outcomes.append(invoke_tool_method(tool, "aio.double", {"x": 1}, ctx))
    )
    worker.start()
    worker.join()
    assert outcomes == [ToolResult(text="2", value="s")]
    assert tool.threads == [threading.get_ident(), worker.ident]


def test_the_async_entry_point_awaits_async_methods_and_calls_plain_ones_on_the_loop() -> None:
    tool = _async_tool()
    ctx = _ctx()

    async def scenario() -> list[ToolResult]:
        return [
            await invoke_tool_method_async(tool, "aio.double", {"x": 5}, ctx),
            await invoke_tool_method_async(tool, "aio.plain", {}, ctx),
            await invoke_tool_method_async(tool, "aio.text", {}, ctx),
            await invoke_tool_method_async(tool, "aio.fail", {"message": "nope"}, ctx),
            await invoke_tool_method_async(tool, "aio.wrong_type", {}, ctx),
            await invoke_tool_method_async(tool, "aio.missing", {}, ctx),
            await invoke_tool_method_async(tool, "__batch__", {}, ctx),
            # The sync entry point cannot run an async method on a thread that runs a loop: it says so.
            invoke_tool_method(tool, "aio.double", {"x": 1}, ctx),
        ]

    results = asyncio.run(scenario())
    assert [result.text for result in results] == [
        "10",
        "sync",
        "plain",
        "Error: nope",
        "Error: TypeError: aio.wrong_type returned int, expected ToolResult or str",
        "Error: KeyError: 'aio.missing'",
        "Error: ValueError: a batch of calls runs through invoke_tool_method, off the event loop",
        "Error: RuntimeError: aio.double is async and this thread runs an event loop: await "
        "invoke_tool_method_async",
    ]
    assert tool.threads == [threading.get_ident()] * 2  # both on the loop's thread


def test_a_cancelled_async_call_propagates_the_cancellation() -> None:
    tool = _async_tool()

    async def scenario() -> None:
        call = asyncio.ensure_future(invoke_tool_method_async(tool, "aio.wait", {"seconds": 30}, _ctx()))
        await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(invoke_tool_method_async(tool, "aio.wait", {"seconds": 30}, _ctx()), 0.01)

    asyncio.run(asyncio.wait_for(scenario(), 10))
