"""Batched tool methods: a tool runs many calls of one method at once (one forward pass of a model).

A tool declares a batched counterpart of a `@tool_method` by defining `batch_<method>`, which takes the
validated keyword arguments of each call and their contexts, and returns one output per call, in order:
a `ToolResult`, a text, or an exception (that call's error). The Toolshed gathers concurrent calls
(`ToolDeployment.batch_size`, `batch_window_ms`) and sends them as one `BATCH_CALL`; if the batched
method raises as a whole, the calls run one by one, so one bad input never fails its neighbours.

    @tool_method
    def classify(self, text: str) -> ToolResult: ...

    def batch_classify(self, calls: list[dict[str, Any]], contexts: list[ToolContext]) -> list[ToolResult]:
        ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spacetools.kit.definition import (
    BATCH_CALL,
    Tool,
    ToolContext,
    ToolResult,
    error_result,
    invoke_tool_method,
    tool_methods,
)

__all__ = ["BatchResult", "batch_attribute", "has_batched_method", "invoke_batch", "invoke_call"]


@dataclass
class BatchResult(ToolResult):
    """The results of a batch of calls, in call order (its own text only summarises)."""

    results: list[ToolResult] = field(default_factory=list)


def batch_attribute(attribute: str) -> str:
    """The name of the batched counterpart of tool method attribute `attribute`."""
    return f"batch_{attribute}"


def has_batched_method(tool_cls: type[Tool], method: str) -> bool:
    """Whether the tool method with public name `method` has a callable batched counterpart."""
    spec = tool_methods(tool_cls)[method]
    return callable(getattr(tool_cls, batch_attribute(spec.attribute), None))


def invoke_call(tool: Tool, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Run one call as a backend receives it: a gathered batch (`BATCH_CALL`) or one tool method's call
    (`invoke_tool_method`); every exception becomes an error result."""
    if method == BATCH_CALL:
        return invoke_batch(tool, **kwargs)
    return invoke_tool_method(tool, method, kwargs, ctx)


def invoke_batch(
    tool: Tool, method: str, calls: list[dict[str, Any]], contexts: list[ToolContext]
) -> BatchResult:
    """Run a batch of validated calls of `method` on `tool`; every call gets its own result."""
    try:
        attribute = tool_methods(type(tool))[method].attribute
        outputs = list(getattr(tool, batch_attribute(attribute))(calls, contexts))
        if len(outputs) != len(calls):
            raise ValueError(f"{method} returned {len(outputs)} outputs for a batch of {len(calls)} calls")
        results = [_as_result(method, output) for output in outputs]
    except Exception:
        results = [
            invoke_tool_method(tool, method, kwargs, ctx) for kwargs, ctx in zip(calls, contexts, strict=True)
        ]
    return BatchResult(text=f"{len(results)} results of {method}", results=results)


def _as_result(method: str, output: Any) -> ToolResult:
    if isinstance(output, ToolResult):
        return output
    if isinstance(output, str):
        return ToolResult(text=output)
    if isinstance(output, Exception):
        return error_result(output)
    raise TypeError(f"{method} batch returned {type(output).__name__}, expected ToolResult, str or Exception")
