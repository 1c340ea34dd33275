"""How a tool is defined: the `Tool` base class, `@tool_method`, errors and JSON schemas (and, from
`kit.results`, the `ToolResult` a method returns).

A tool is a class whose methods marked `@tool_method` are what the model may call, by the public name
`"<Tool.name>.<method>"`. Each method's arguments get one pydantic model, built from its type hints and
its Google-style docstring (`kit.argument_models`): it validates every call, and pydantic generates from it
the JSON schema the model sees. A method may also declare which keys of its result's `value` are
geometry (`@tool_method(geometry={"points": "points"})`), so that code such as the evaluation report
draws them without knowing the tool.

A tool method may be an `async def` coroutine function: the Toolshed's in-process backend awaits it on
the server's event loop (`invoke_tool_method_async`, no thread hop; it must not block), and the contexts
that have no event loop (a worker process, a Ray actor, an instance's thread, a batch) run it to
completion on a loop of their thread (`invoke_tool_method`).
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, overload

import docstring_parser
import numpy as np
from pydantic import BaseModel, ValidationError

from spacetools.kit.argument_models import (
    ArgumentField,
    Variable,
    arguments_model,
    describe_problem,
    parameters_schema,
    with_reference_hint,
)
from spacetools.kit.coroutines import run_to_completion
from spacetools.kit.errors import ToolArgumentError, ToolError
from spacetools.kit.results import MAX_ERROR_CHARS, ToolResult, sanitize_error_text

__all__ = [
    "BATCH_CALL",
    "GEOMETRY_KINDS",
    "MAX_ERROR_CHARS",
    "Tool",
    "ToolArgumentError",
    "ToolContext",
    "ToolError",
    "ToolMethod",
    "ToolResult",
    "ToolSpec",
    "Variable",
    "error_result",
    "hermes_tools_block",
    "invoke_tool_method",
    "invoke_tool_method_async",
    "release_tool_session",
    "releases_sessions",
    "sanitize_error_text",
    "tool_method",
    "tool_methods",
    "tool_specs",
]

#: The method name under which the Toolshed sends a gathered batch of calls (see kit.batched_methods).
BATCH_CALL = "__batch__"
#: The kinds of geometry a tool method's `value` may hold under a key, all in normalized image
#: coordinates of the image the call worked on: ``points`` (any number of ``[x, y]``), ``corners`` (the
#: 8 projected corners of a 3D box, in the order of `rewards.formats.BOX_EDGES`) and ``grasp`` (the 5
#: gripper points of `rewards.formats.GRASP_LABELS`). They are the report's drawing kinds of the same names.
GEOMETRY_KINDS = ("points", "corners", "grasp")
_TOOL_METHOD_MARK = "__spacetools_tool_method__"
_GEOMETRY_MARK = "__spacetools_geometry__"
_F = TypeVar("_F", bound=Callable[..., Any])
_log = logging.getLogger(__name__)


class ToolContext:
    """Per-call context injected into a tool method's keyword-only `ctx` parameter.

    A call receives only the images its arguments reference (its `image_index` arguments), the size
    of every image of the conversation, and one attachment dict per image: per-image metadata the
    caller supplied (e.g. a simulated scene under ``"scene"``) that the Toolshed passes through unread.
    `rng` is the call's random generator, given as one or as the seed it is made from (on first use:
    most calls draw nothing, and making one costs tens of microseconds).
    """

    def __init__(
        self,
        session_id: str,
        images: dict[int, np.ndarray],
        image_sizes: list[tuple[int, int]],
        attachments: list[dict[str, Any]],
        rng: np.random.Generator | int,
    ) -> None:
        self.session_id = session_id
        self.images = images
        self.image_sizes = image_sizes
        self.attachments = attachments
        self._rng: np.random.Generator | int = rng

    @property
    def rng(self) -> np.random.Generator:
        """The call's random generator (`np.random.default_rng(seed)` when given a seed)."""
        if not isinstance(self._rng, np.random.Generator):
            self._rng = np.random.default_rng(self._rng)
        return self._rng

    @property
    def seed(self) -> int | None:
        """The seed `rng` is made from, until it is made (None after, and when given a generator)."""
        return None if isinstance(self._rng, np.random.Generator) else self._rng

    def __repr__(self) -> str:
        return (
            f"ToolContext(session_id={self.session_id!r}, images={sorted(self.images)}, "
            f"image_sizes={self.image_sizes!r}, attachments={len(self.attachments)})"
        )

    def __getstate__(self) -> dict[str, Any]:
        # A seed pickles as itself. Pickling a Generator re-seeds a bit generator from the OS (~0.1 ms
        # per call sent to a worker); its state dict pickles in microseconds and restores the stream.
        state = dict(self.__dict__)
        if isinstance(self._rng, np.random.Generator):
            bit_generator = self._rng.bit_generator
            if hasattr(np.random, type(bit_generator).__name__):
                state["_rng"] = (type(bit_generator).__name__, bit_generator.state)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        rng = state["_rng"]
        if isinstance(rng, tuple):
            name, bit_state = rng
            bit_generator = getattr(np.random, name)(0)
            bit_generator.state = bit_state
            rng = np.random.Generator(bit_generator)
        self.__dict__.update(state, _rng=rng)

    @classmethod
    def local(
        cls,
        images: Sequence[np.ndarray],
        *,
        attachments: Sequence[dict[str, Any]] | None = None,
        seed: int = 0,
        session_id: str = "local",
    ) -> ToolContext:
        """The context of a direct call (no Toolshed) that may reference every one of `images`."""
        return cls(
            session_id=session_id,
            images=dict(enumerate(images)),
            image_sizes=[(image.shape[0], image.shape[1]) for image in images],
            attachments=list(attachments) if attachments is not None else [{} for _ in images],
            rng=seed,
        )

    @property
    def image_count(self) -> int:
        """How many images the conversation has."""
        return len(self.image_sizes)

    def image(self, index: int) -> np.ndarray:
        """The conversation's image at `index` (0-based); a `ToolError` when there is none.

        Only images named by the call's `image_index` arguments are sent with a call.
        """
        self._check_index(index)
        if index not in self.images:
            raise ToolError(f"image {index} was not sent with this call (pass it as image_index)")
        return self.images[index]

    def image_size(self, index: int) -> tuple[int, int]:
        """``(height, width)`` of the conversation's image at `index`."""
        self._check_index(index)
        return self.image_sizes[index]

    def attachment(self, index: int) -> dict[str, Any]:
        """The metadata attached to image `index` (an empty dict when none was attached)."""
        self._check_index(index)
        return self.attachments[index] if index < len(self.attachments) else {}

    def _check_index(self, index: int) -> None:
        if not 0 <= index < self.image_count:
            count = self.image_count
            available = f"0..{count - 1}" if count else "none"
            raise ToolError(
                f"image_index {index} is out of range: the conversation has {count} "
                f"image(s) (valid indices: {available})"
            )


@overload
def tool_method(fn: _F, /) -> _F: ...


@overload
def tool_method(*, geometry: Mapping[str, str]) -> Callable[[_F], _F]: ...


def tool_method(
    fn: _F | None = None, /, *, geometry: Mapping[str, str] | None = None
) -> _F | Callable[[_F], _F]:
    """Mark a method of a `Tool` subclass as callable by the model (``@tool_method``).

    ``@tool_method(geometry={"corners_2d": "corners"})`` also declares which keys of the method's
    ``value`` hold geometry, each with its kind (one of `GEOMETRY_KINDS`); the spec carries it.
    """
    declared = dict(geometry or {})
    unknown = sorted(kind for kind in declared.values() if kind not in GEOMETRY_KINDS)
    if unknown:
        raise ValueError(f"unknown geometry kinds {unknown}; choose from {', '.join(GEOMETRY_KINDS)}")

    def mark(method: _F) -> _F:
        setattr(method, _TOOL_METHOD_MARK, True)
        setattr(method, _GEOMETRY_MARK, declared)
        return method

    return mark if fn is None else mark(fn)


class Tool:
    """Base class of every tool: set `name`, mark methods with `@tool_method`, load heavy things in `setup`.

    Import-time work must stay light: the Toolshed imports tool classes in the server process only to
    build schemas, and constructs them (and runs `setup`) inside each instance.
    """

    name: ClassVar[str]
    config_keys: ClassVar[frozenset[str]] = frozenset()
    """Deployment settings the tool understands (e.g. ``"profile"`` for the simulated tools)."""

    def __init__(self, **config: Any) -> None:
        self.check_config(config)
        self.config = config

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        """Raise a `ValueError` naming what is wrong with a deployment's settings (default: accept all)."""

    def setup(self) -> None:
        """Load weights, build scenes, etc.; runs once per instance before its first call."""

    def release_session(self, session_id: str) -> None:
        """Free what this instance holds for a session that was closed or expired (default: nothing).

        The Toolshed calls it on every live instance, after the calls already sent to that instance,
        for tools that override it; an exception here is logged, never raised to a caller.
        """


@dataclass(frozen=True)
class ToolSpec:
    """The description of one tool method: what the model sees (`to_openai`), and for code, which keys
    of its `value` hold geometry of which kind (``{"points": "points"}``; see `GEOMETRY_KINDS`)."""

    name: str
    description: str
    parameters: dict[str, Any]
    geometry: dict[str, str] = field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool method (a copy: callers may reshape it)."""
        parameters = copy.deepcopy(self.parameters)  # specs are cached per class and shared
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


@dataclass(frozen=True)
class ToolMethod:
    """One tool method: its public name, spec, argument validator, whether it takes `ctx` and whether it
    is a coroutine function (`is_async`: ``async def``)."""

    name: str
    attribute: str
    spec: ToolSpec
    arguments_model: type[BaseModel]
    wants_context: bool
    image_parameters: tuple[str, ...] = ()
    """Arguments that name a conversation image (``image_index``, ``*_image_index``)."""
    is_async: bool = False
    """An ``async def`` method: awaited on an event loop (`invoke_tool_method_async`)."""

    def referenced_images(self, kwargs: Mapping[str, Any]) -> list[int]:
        """The image indices a validated call refers to (the only images sent with it)."""
        if not self.image_parameters:
            return []
        return sorted({kwargs[p] for p in self.image_parameters if isinstance(kwargs.get(p), int)})

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments, or a `ToolArgumentError` naming each bad argument."""
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(
                f"invalid arguments for {self.name}: expected a JSON object, got {type(arguments).__name__}"
            )
        try:
            # The model's validator itself: `model_validate` checks its options on every call.
            model = self.arguments_model.__pydantic_validator__.validate_python(dict(arguments))
        except ValidationError as exc:
            expected = ", ".join(self.spec.parameters["properties"]) or "no arguments"
            problems = "; ".join(describe_problem(err, expected) for err in exc.errors())
            raise ToolArgumentError(f"invalid arguments for {self.name}: {problems}") from None
        return dict(model.__dict__)  # the fields, in order (the model forbids extra ones)


def tool_methods(tool_cls: type[Tool]) -> dict[str, ToolMethod]:
    """All tool methods of a tool class by public name, in definition order (cached per class)."""
    cached: dict[str, ToolMethod] | None = tool_cls.__dict__.get("_spacetools_methods")
    if cached is not None:
        return cached
    tool_name = getattr(tool_cls, "name", None)
    if not isinstance(tool_name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tool_name):
        raise TypeError(f"{tool_cls.__qualname__} must set `name` to an identifier (got {tool_name!r})")
    methods: dict[str, ToolMethod] = {}
    seen: set[str] = set()
    for klass in tool_cls.__mro__:
        for attribute, fn in vars(klass).items():
            if attribute in seen or not getattr(fn, _TOOL_METHOD_MARK, False):
                continue
            seen.add(attribute)
            method = _build_tool_method(f"{tool_name}.{attribute}", attribute, fn)
            methods[method.name] = method
    if not methods:
        raise TypeError(f"{tool_cls.__qualname__} has no @tool_method methods")
    tool_cls._spacetools_methods = methods  # type: ignore[attr-defined]
    return methods


def tool_specs(tool_cls: type[Tool]) -> list[ToolSpec]:
    """The `ToolSpec` of every tool method of `tool_cls`."""
    return [method.spec for method in tool_methods(tool_cls).values()]


def hermes_tools_block(specs: list[ToolSpec]) -> str:
    """The `<tools>` block of a Qwen2.5 hermes system prompt: one function schema per line."""
    lines = [json.dumps(spec.to_openai(), ensure_ascii=False) for spec in specs]
    return "<tools>\n" + "\n".join(lines) + "\n</tools>"


def release_tool_session(tool: Tool, session_id: str) -> None:
    """Run a tool's `release_session` hook; a failure is logged (a closing session has no caller)."""
    try:
        tool.release_session(session_id)
    except Exception:
        _log.exception("%s.release_session(%s) failed", type(tool).__name__, session_id)


def releases_sessions(tool_cls: type[Tool]) -> bool:
    """Whether a tool class holds per-session state to free (it overrides `Tool.release_session`)."""
    return tool_cls.release_session is not Tool.release_session


def invoke_tool_method(tool: Tool, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Run one tool method on an instance; every exception becomes an error result.

    For the contexts without an event loop (a worker, an actor, a thread): an ``async def`` method runs
    to completion on an event loop kept by the calling thread. A batch (`BATCH_CALL`) is not run here:
    the backends send it to `batched_methods.invoke_call`.
    """
    try:
        spec = tool_methods(type(tool))[method]
        if spec.is_async:
            return _as_result(method, run_to_completion(_start(tool, spec, kwargs, ctx), method))
        return _as_result(method, _start(tool, spec, kwargs, ctx))
    except Exception as exc:
        return error_result(exc)


async def invoke_tool_method_async(
    tool: Tool, method: str, kwargs: dict[str, Any], ctx: ToolContext
) -> ToolResult:
    """Run one tool method on the running event loop: await an ``async def`` method, call a plain one.

    Every exception becomes an error result, as in `invoke_tool_method`; a cancellation (the caller's
    timeout) propagates. A batch is not run here: it goes through `invoke_tool_method`, on a thread.
    """
    try:
        if method == BATCH_CALL:
            raise ValueError("a batch of calls runs through invoke_tool_method, off the event loop")
        spec = tool_methods(type(tool))[method]
        output = _start(tool, spec, kwargs, ctx)
        return _as_result(method, await output if spec.is_async else output)
    except Exception as exc:
        return error_result(exc)


def _start(tool: Tool, spec: ToolMethod, kwargs: dict[str, Any], ctx: ToolContext) -> Any:
    """Call the tool method: its output, or the coroutine of an ``async def`` method."""
    bound = getattr(tool, spec.attribute)
    return bound(**kwargs, ctx=ctx) if spec.wants_context else bound(**kwargs)


def _as_result(method: str, output: Any) -> ToolResult:
    """A tool method's output as a result: a text becomes one; anything else is a `TypeError`."""
    if isinstance(output, str):
        return ToolResult(text=output)
    if not isinstance(output, ToolResult):
        raise TypeError(f"{method} returned {type(output).__name__}, expected ToolResult or str")
    return output


def error_result(exc: BaseException) -> ToolResult:
    """The sanitized error result for an exception: `Error: <Type>: <message>` (`ToolError`: no type)."""
    message = str(exc)
    text = message if isinstance(exc, ToolError) else f"{type(exc).__name__}: {message}".rstrip(": ")
    return ToolResult(text="Error: " + sanitize_error_text(text), is_error=True)


# --- schema and validator construction -------------------------------------------------------------


def _build_tool_method(name: str, attribute: str, fn: Callable[..., Any]) -> ToolMethod:
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    arg_docs = {param.arg_name: (param.description or "").strip() for param in doc.params}
    description = "\n\n".join(part.strip() for part in (doc.short_description, doc.long_description) if part)
    if not description:
        raise TypeError(f"tool method {name} needs a docstring")

    arguments: dict[str, ArgumentField] = {}
    wants_context = False
    for param in list(signature.parameters.values())[1:]:  # skip self
        if param.name == "ctx" or hints.get(param.name) is ToolContext:
            if param.kind is not inspect.Parameter.KEYWORD_ONLY:
                raise TypeError(f"{name}: `ctx` must be keyword-only (write `*, ctx: ToolContext`)")
            wants_context = True
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"{name}: *args and **kwargs cannot be described to a model")
        if param.name not in hints:
            raise TypeError(f"{name}: argument {param.name} needs a type hint")
        if not arg_docs.get(param.name):
            raise TypeError(f"{name}: argument {param.name} is not described in the docstring's Args section")
        hint = hints[param.name]
        default = ... if param.default is inspect.Parameter.empty else param.default
        arguments[param.name] = ArgumentField(hint, default, with_reference_hint(arg_docs[param.name], hint))
    unknown_docs = set(arg_docs) - set(arguments) - {"ctx"}
    if unknown_docs:
        raise TypeError(f"{name}: the docstring describes arguments it does not take: {sorted(unknown_docs)}")

    model = arguments_model(f"{name.replace('.', '_')}_arguments", arguments)
    parameters = parameters_schema(model, name)
    image_parameters = tuple(
        param for param in arguments if param == "image_index" or param.endswith("_image_index")
    )
    spec = ToolSpec(name, description, parameters, dict(getattr(fn, _GEOMETRY_MARK, {})))
    return ToolMethod(
        name, attribute, spec, model, wants_context, image_parameters, inspect.iscoroutinefunction(fn)
    )
