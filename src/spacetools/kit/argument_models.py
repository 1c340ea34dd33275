"""A tool method's arguments: the pydantic model that validates them and the JSON schema the model sees.

Both come from one pydantic model built from the method's type hints: pydantic validates a call's
arguments with it and generates its JSON schema. Two kinds of hint need a word: a `numpy.ndarray`
argument is always a `"$name"` reference to a stored array (its schema says "string"; it also accepts
nested lists of numbers sent by value), and `Variable[T]` marks a T that may be written as a literal or
as such a reference.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar, Union

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    PlainValidator,
    TypeAdapter,
    WithJsonSchema,
    create_model,
)
from pydantic.errors import PydanticInvalidForJsonSchema
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

__all__ = [
    "REFERENCE_HINT",
    "ArgumentField",
    "Variable",
    "arguments_model",
    "describe_problem",
    "is_reference",
    "parameters_schema",
    "with_reference_hint",
]

REFERENCE_HINT = 'a "$name" reference to a variable from an earlier tool call'
_T = TypeVar("_T")


class _VariableReference:
    """The `Variable[T]` mark: its JSON schema also admits a `"$name"` string."""

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        if json_schema.get("type") == "string":
            return json_schema
        return {"anyOf": [json_schema, {"type": "string"}]}


_VARIABLE_MARK = _VariableReference()

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


class ArgumentField(NamedTuple):
    """One argument of a tool method: its type hint, default (`...` when required) and description."""

    hint: Any
    default: Any
    description: str


_CONFIG = ConfigDict(strict=True, extra="forbid", arbitrary_types_allowed=True)


def arguments_model(model_name: str, arguments: Mapping[str, ArgumentField]) -> type[BaseModel]:
    """The strict pydantic model of a method's arguments (built once per method: calls only validate)."""
    fields: dict[str, Any] = {
        name: (_validation_type(arg.hint), Field(arg.default, description=arg.description))
        for name, arg in arguments.items()
    }
    return create_model(model_name, __config__=_CONFIG, **fields)


def parameters_schema(model: type[BaseModel], where: str) -> dict[str, Any]:
    """The `parameters` JSON schema of a tool method: an object with one property per argument."""
    try:
        schema = model.model_json_schema(schema_generator=_ToolSchemaGenerator)
    except PydanticInvalidForJsonSchema as exc:
        culprits = [name for name, info in model.model_fields.items() if not _describable(info)]
        argument = f"({', '.join(culprits)})" if culprits else ""
        raise TypeError(
            f"{where}{argument}: cannot describe its type in a JSON schema ({exc.message})"
        ) from None
    # Drop the model's title and `additionalProperties`: the model is told only the properties.
    return {"type": "object", "properties": schema["properties"], "required": schema.get("required", [])}


def _describable(info: FieldInfo) -> bool:
    adapter: TypeAdapter[Any] = TypeAdapter(info.rebuild_annotation(), config=_CONFIG)
    try:
        adapter.json_schema(schema_generator=_ToolSchemaGenerator)
    except PydanticInvalidForJsonSchema:
        return False
    return True


class _ToolSchemaGenerator(GenerateJsonSchema):
    """pydantic's JSON schema, shaped as the tool schemas have always been shown to the model."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False  # the argument's name is the property name; its docstring line is the description

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])  # optional arguments are those not required

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])  # `X | None = None`: the default stands for "absent"

    def sort(self, value: JsonSchemaValue, parent_key: str | None = None) -> JsonSchemaValue:
        """pydantic's order of keys (arguments in definition order, description last) but "type" first."""
        if isinstance(value, list):
            return [self.sort(item, parent_key) for item in value]
        if not isinstance(value, dict):
            return value
        keys = list(value) if parent_key == "properties" else sorted(value, key=lambda key: key != "type")
        return {key: self.sort(value[key], key) for key in keys}


def _as_array(value: Any) -> np.ndarray:
    """Accept an array, or nested lists of numbers sent by value; a plain string is a reference gone wrong."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__array__") and hasattr(value, "shape") and not isinstance(value, (list, tuple)):
        # An array held elsewhere (Ray's object store), read where the tool runs.
        return typing.cast(np.ndarray, value)
    if isinstance(value, str):
        raise ValueError(f"expected {REFERENCE_HINT}")
    if isinstance(value, (list, tuple)):
        try:
            array = np.asarray(value)
        except ValueError:
            raise ValueError("expected an array; got ragged nested lists") from None
        if array.dtype.kind in "biuf":
            return array
    raise ValueError(f"expected an array or {REFERENCE_HINT}")


_ARRAY = Annotated[Any, PlainValidator(_as_array), WithJsonSchema({"type": "string"})]


def _list_to_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _validation_type(hint: Any) -> Any:
    """The pydantic type of a hint: arrays go through `_as_array`, tuples accept JSON's lists."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_array(hint):
        return _ARRAY
    if origin is Annotated:  # keep the marks (`Variable`'s shapes the schema); nesting flattens them
        validated = _validation_type(args[0])
        for mark in hint.__metadata__:
            validated = Annotated[validated, mark]
        return validated
    if origin in (Union, types.UnionType):
        return Union[tuple(_validation_type(member) for member in args)]  # noqa: UP007
    if origin is list and args:
        return list[_validation_type(args[0])]  # type: ignore[misc]
    if origin is tuple or hint is tuple:
        members = tuple(arg if arg is Ellipsis else _validation_type(arg) for arg in args)
        inner = tuple[members] if args else tuple  # type: ignore[valid-type]
        # Strict validation takes only a tuple where the hint says tuple, and JSON has only lists.
        return Annotated[inner, BeforeValidator(_list_to_tuple)]
    return hint


def _is_array(hint: Any) -> bool:
    return hint is np.ndarray or typing.get_origin(hint) is np.ndarray


def is_reference(hint: Any) -> bool:
    """Whether an argument is (or may be) a `"$name"` reference: an array or a `Variable[...]`."""
    if typing.get_origin(hint) is Annotated:
        hint, *metadata = typing.get_args(hint)
        if any(isinstance(mark, _VariableReference) for mark in metadata):
            return True
    if typing.get_origin(hint) in (Union, types.UnionType):
        return any(is_reference(member) for member in typing.get_args(hint))
    return _is_array(hint)


def with_reference_hint(description: str, hint: Any) -> str:
    """An argument's description, telling the model how to write a reference where it takes one."""
    if not is_reference(hint) or "$" in description:
        return description
    return f"{description.rstrip('.')} ({REFERENCE_HINT})."


def describe_problem(error: Mapping[str, Any], expected: str) -> str:
    """One pydantic validation error as `<argument>: <problem>`; `expected` lists the argument names."""
    where = ".".join(str(part) for part in error["loc"]) or "arguments"
    if error["type"] == "missing":
        return f"{where}: missing required argument"
    if error["type"] == "extra_forbidden":
        return f"{where}: unexpected argument (expected: {expected})"
    shown = repr(error["input"])
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{where}: {error['msg']} (got {shown})"
