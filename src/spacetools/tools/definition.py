"""How a tool is defined: the `Tool` base class, `@tool_method`, results, errors and JSON schemas.

A tool is a class whose methods marked `@tool_method` are what the model may call, by the public name
`"<Tool.name>.<method>"`. The JSON schema of each method comes from its type hints and its Google-style
docstring; arguments are validated with a pydantic model built from the same signature.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar, Union

import docstring_parser
import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainValidator, ValidationError, create_model

__all__ = [
    "BATCH_CALL",
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
    "release_tool_session",
    "releases_sessions",
    "sanitize_error_text",
    "tool_method",
    "tool_methods",
    "tool_specs",
]

MAX_ERROR_CHARS = 500
#: The method name under which the Toolshed sends a gathered batch of calls (see tools.batching).
BATCH_CALL = "__batch__"
_TOOL_METHOD_MARK = "__spacetools_tool_method__"
_VARIABLE_MARK = "spacetools-variable"
_REFERENCE_HINT = 'a "$name" reference to a variable from an earlier tool call'
_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")
_log = logging.getLogger(__name__)


class ToolError(Exception):
    """An error the model should read: raise it inside a tool method."""


class ToolArgumentError(ToolError):
    """The arguments of a call do not match the tool method's signature."""


@dataclass
class ToolResult:
    """What a tool call gives back: text for the model, a structured value for code, pictures, variables.

    ``text`` is the model's protocol (byte-compatible with the original tools); ``value`` is the same
    result as JSON-able data (dicts, lists, floats, strings; no numpy) that the expert and the report
    read instead of parsing the text. ``image_indices`` are the conversation indices the session gave
    ``images`` when it stored them (filled by the Toolshed, not by tools). ``attachments`` (empty, or
    one per picture, None for none) is the metadata the session keeps with each picture for later tool
    calls on it, like a task image's (e.g. the simulated scene a robot's photo shows); it is for the
    tools only: the model never sees it, and the HTTP API does not send it.
    """

    text: str
    images: list[np.ndarray] = field(default_factory=list)
    attachments: list[dict[str, Any] | None] = field(default_factory=list)
    variables: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False
    value: Any = None  # the structured, JSON-able result that code reads (text is for the model)
    image_indices: list[int] = field(default_factory=list)

    @classmethod
    def error(cls, message: str) -> ToolResult:
        """An error result whose text is `"Error: <message>"`."""
        return cls(text=f"Error: {message}", is_error=True)


@dataclass
class ToolContext:
    """Per-call context injected into a tool method's keyword-only `ctx` parameter.

    A call receives only the images its arguments reference (its `image_index` arguments), the size
    of every image of the conversation, and one attachment dict per image: per-image metadata the
    caller supplied (e.g. a simulated scene under ``"scene"``) that the Toolshed passes through unread.
    """

    session_id: str
    images: dict[int, np.ndarray]
    image_sizes: list[tuple[int, int]]
    attachments: list[dict[str, Any]]
    rng: np.random.Generator

    def __getstate__(self) -> dict[str, Any]:
        # Pickling a Generator re-seeds a bit generator from the OS (~0.1 ms per call sent to a worker);
        # its state dict pickles in microseconds and restores the stream exactly.
        state = dict(self.__dict__)
        bit_generator = self.rng.bit_generator
        if hasattr(np.random, type(bit_generator).__name__):
            state["rng"] = (type(bit_generator).__name__, bit_generator.state)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        rng = state["rng"]
        if isinstance(rng, tuple):
            name, bit_state = rng
            bit_generator = getattr(np.random, name)(0)
            bit_generator.state = bit_state
            rng = np.random.Generator(bit_generator)
        self.__dict__.update(state, rng=rng)

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
            rng=np.random.default_rng(seed),
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


if TYPE_CHECKING:
    # For the type checker `Variable[T]` is `T` itself: the reference is resolved before the call.
    Variable = Annotated[_T, "variable"]
else:

    class Variable:
        """`Variable[T]` marks a parameter that usually receives a `"$name"` reference to a stored T.

        `numpy.ndarray` parameters are always references; use `Variable[float]` for a scalar that may be
        written as a literal or as a reference (e.g. `focal_length_px`).
        """

        def __class_getitem__(cls, item: Any) -> Any:
            return typing.Annotated[item, _VARIABLE_MARK]


def tool_method(fn: _F) -> _F:
    """Mark a method of a `Tool` subclass as callable by the model."""
    setattr(fn, _TOOL_METHOD_MARK, True)
    return fn


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
    """The model-facing description of one tool method."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool method (a copy: callers may reshape it)."""
        parameters = copy.deepcopy(self.parameters)  # specs are cached per class and shared
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


@dataclass(frozen=True)
class ToolMethod:
    """One tool method: its public name, spec, argument validator and whether it takes `ctx`."""

    name: str
    attribute: str
    spec: ToolSpec
    arguments_model: type[BaseModel]
    wants_context: bool
    image_parameters: tuple[str, ...] = ()
    """Arguments that name a conversation image (``image_index``, ``*_image_index``)."""

    def referenced_images(self, kwargs: Mapping[str, Any]) -> list[int]:
        """The image indices a validated call refers to (the only images sent with it)."""
        return sorted({kwargs[p] for p in self.image_parameters if isinstance(kwargs.get(p), int)})

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments, or a `ToolArgumentError` naming each bad argument."""
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(
                f"invalid arguments for {self.name}: expected a JSON object, got {type(arguments).__name__}"
            )
        try:
            model = self.arguments_model.model_validate(dict(arguments))
        except ValidationError as exc:
            expected = ", ".join(self.spec.parameters["properties"]) or "no arguments"
            problems = "; ".join(_describe_problem(err, expected) for err in exc.errors())
            raise ToolArgumentError(f"invalid arguments for {self.name}: {problems}") from None
        return {key: getattr(model, key) for key in type(model).model_fields}


def _describe_problem(error: Mapping[str, Any], expected: str) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "arguments"
    if error["type"] == "missing":
        return f"{where}: missing required argument"
    if error["type"] == "extra_forbidden":
        return f"{where}: unexpected argument (expected: {expected})"
    shown = repr(error["input"])
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{where}: {error['msg']} (got {shown})"


def tool_methods(tool_cls: type[Tool]) -> dict[str, ToolMethod]:
    """All tool methods of a tool class by public name, in definition order (cached per class)."""
    cached = tool_cls.__dict__.get("_spacetools_methods")
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
    """Run one tool method on an instance; every exception becomes an error result."""
    if method == BATCH_CALL:
        from spacetools.tools.batching import invoke_batch  # builds on this module

        return invoke_batch(tool, **kwargs)
    try:
        spec = tool_methods(type(tool))[method]
        bound = getattr(tool, spec.attribute)
        output = bound(**kwargs, ctx=ctx) if spec.wants_context else bound(**kwargs)
        if isinstance(output, str):
            return ToolResult(text=output)
        if not isinstance(output, ToolResult):
            raise TypeError(f"{method} returned {type(output).__name__}, expected ToolResult or str")
        return output
    except Exception as exc:
        return error_result(exc)


def error_result(exc: BaseException) -> ToolResult:
    """The sanitized error result for an exception: `Error: <Type>: <message>` (`ToolError`: no type)."""
    message = str(exc)
    text = message if isinstance(exc, ToolError) else f"{type(exc).__name__}: {message}".rstrip(": ")
    return ToolResult(text="Error: " + sanitize_error_text(text), is_error=True)


_TRACEBACK_LINE = re.compile(r'^\s*(Traceback \(most recent call last\)|File "|\^+$|~+$)')
_PATH = re.compile(r"(?:[A-Za-z]:\\|/)(?:[\w.+-]+[/\\])+([\w.+-]+)")


def sanitize_error_text(text: str, max_chars: int = MAX_ERROR_CHARS) -> str:
    """Strip traceback lines and directories, collapse whitespace and cap the length of an error text."""
    lines = [line for line in text.splitlines() if not _TRACEBACK_LINE.match(line)]
    cleaned = " ".join(" ".join(lines).split())
    cleaned = _PATH.sub(r"\1", cleaned)
    if len(cleaned) > max_chars:
        cleaned = cleaned[: max_chars - 3].rstrip() + "..."
    return cleaned


# --- schema and validator construction -------------------------------------------------------------


def _build_tool_method(name: str, attribute: str, fn: Callable[..., Any]) -> ToolMethod:
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    arg_docs = {param.arg_name: (param.description or "").strip() for param in doc.params}
    description = "\n\n".join(part.strip() for part in (doc.short_description, doc.long_description) if part)
    if not description:
        raise TypeError(f"tool method {name} needs a docstring")

    properties: dict[str, Any] = {}
    required: list[str] = []
    fields: dict[str, Any] = {}
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
        schema = _json_schema(hint, f"{name}({param.name})")
        schema["description"] = _with_reference_hint(arg_docs[param.name], hint)
        properties[param.name] = schema
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
            fields[param.name] = (_validation_type(hint), ...)
        else:
            fields[param.name] = (_validation_type(hint), param.default)
    unknown_docs = set(arg_docs) - set(properties) - {"ctx"}
    if unknown_docs:
        raise TypeError(f"{name}: the docstring describes arguments it does not take: {sorted(unknown_docs)}")

    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    model = create_model(
        f"{name.replace('.', '_')}_arguments",
        __config__=ConfigDict(strict=True, extra="forbid", arbitrary_types_allowed=True),
        **fields,
    )
    image_parameters = tuple(
        param for param in properties if param == "image_index" or param.endswith("_image_index")
    )
    return ToolMethod(
        name, attribute, ToolSpec(name, description, parameters), model, wants_context, image_parameters
    )


def _is_array(hint: Any) -> bool:
    return hint is np.ndarray or typing.get_origin(hint) is np.ndarray


def _strip_annotated(hint: Any) -> tuple[Any, bool]:
    """The bare type of `hint` and whether it was marked `Variable[...]`."""
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        return base, _VARIABLE_MARK in extras
    return hint, False


def _union_args(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return typing.get_args(hint)
    return None


def _is_reference(hint: Any) -> bool:
    base, marked = _strip_annotated(hint)
    members = _union_args(base)
    if members is not None:
        return marked or any(_is_reference(member) for member in members)
    return marked or _is_array(base)


def _with_reference_hint(description: str, hint: Any) -> str:
    if not _is_reference(hint) or "$" in description:
        return description
    return f"{description.rstrip('.')} ({_REFERENCE_HINT})."


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_schema(hint: Any, where: str) -> dict[str, Any]:
    base, marked = _strip_annotated(hint)
    if _is_array(base):
        return {"type": "string"}
    members = _union_args(base)
    if members is not None:
        present = [member for member in members if member is not type(None)]
        if len(present) == 1:  # Optional[X]: the default stands for "absent"
            schema = _json_schema(present[0], where)
        else:
            schemas: list[dict[str, Any]] = []
            for member in present:  # `str | np.ndarray` would otherwise list {"type": "string"} twice
                member_schema = _json_schema(member, where)
                if member_schema not in schemas:
                    schemas.append(member_schema)
            schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    elif base in _SCALARS:
        schema = {"type": _SCALARS[base]}
    elif typing.get_origin(base) is Literal:
        values = list(typing.get_args(base))
        kinds = {_SCALARS[type(value)] for value in values}
        schema = {"type": kinds.pop() if len(kinds) == 1 else sorted(kinds), "enum": values}
    elif typing.get_origin(base) in (list, tuple) or base in (list, tuple):
        schema = _sequence_schema(base, where)
    elif typing.get_origin(base) is dict or base is dict:
        schema = {"type": "object"}
    else:
        raise TypeError(f"{where}: cannot describe type {base!r} in a JSON schema")
    if marked and schema.get("type") != "string":
        schema = {"anyOf": [schema, {"type": "string"}]}
    return schema


def _sequence_schema(base: Any, where: str) -> dict[str, Any]:
    args = typing.get_args(base)
    if not args or args == ((),):
        return {"type": "array"}
    if typing.get_origin(base) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        items = [_json_schema(arg, where) for arg in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    return {"type": "array", "items": _json_schema(args[0], where)}


def _as_array(value: Any) -> np.ndarray:
    """Accept an array, or nested lists of numbers sent by value; a plain string is a reference gone wrong."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__array__") and hasattr(value, "shape") and not isinstance(value, (list, tuple)):
        return value  # an array held elsewhere (Ray's object store), read where the tool runs
    if isinstance(value, str):
        raise ValueError(f"expected {_REFERENCE_HINT}")
    if isinstance(value, (list, tuple)):
        try:
            array = np.asarray(value)
        except ValueError:
            raise ValueError("expected an array; got ragged nested lists") from None
        if array.dtype.kind in "biuf":
            return array
    raise ValueError(f"expected an array or {_REFERENCE_HINT}")


def _validation_type(hint: Any) -> Any:
    """The pydantic type for a hint: arrays go through `_as_array`, the rest is validated as written."""
    base, _marked = _strip_annotated(hint)
    if _is_array(base):
        return typing.Annotated[Any, PlainValidator(_as_array)]
    members = _union_args(base)
    if members is not None:
        return Union[tuple(_validation_type(member) for member in members)]  # noqa: UP007
    origin, args = typing.get_origin(base), typing.get_args(base)
    if origin is list and args:
        return list[_validation_type(args[0])]  # type: ignore[misc]
    if origin is tuple or base is tuple:
        inner = (
            tuple[tuple(_validation_type(arg) if arg is not Ellipsis else arg for arg in args)]  # type: ignore[misc]
            if args
            else tuple
        )
        # JSON has no tuples: accept a list where the hint says tuple, then check it strictly.
        return typing.Annotated[inner, BeforeValidator(_list_to_tuple)]
    return base


def _list_to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
