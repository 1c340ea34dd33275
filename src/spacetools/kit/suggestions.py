"""A misspelt settings key answered with the key that was probably meant.

Pydantic reports an unknown key of a model that forbids extras as ``extra_forbidden`` at its location
(``sft.epochz``); :func:`problem_line` words such an error with the closest field names of the model
at that location (difflib's close matches), and any other error as ``<where>: <message>``.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (itself, or inside Optional, a union, a list or a dict)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, dict, Sequence, Mapping):
        for argument in typing.get_args(annotation):
            found = _model_in(argument)
            if found is not None:
                return found
    return None


def model_at(model: type[BaseModel], path: Sequence[Any]) -> type[BaseModel] | None:
    """The model that holds the last key of ``path`` (None when the path leaves the models)."""
    current: type[BaseModel] | None = model
    for part in path:
        if current is None:
            return None
        if not isinstance(part, str):  # a list index or a dict key: the same model's items
            continue
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _model_in(field.annotation)
    return current


def close_keys(model: type[BaseModel], key: str) -> list[str]:
    """The model's field names (and aliases) closest to ``key``, best first."""
    names = [*model.model_fields, *(f.alias for f in model.model_fields.values() if f.alias)]
    return difflib.get_close_matches(key, names, n=2, cutoff=0.6)


def problem_line(error: Mapping[str, Any], model: type[BaseModel]) -> str:
    """One validation error as ``<where>: <problem>``, an unknown key with the keys it may mean."""
    location = tuple(error["loc"])
    where = ".".join(map(str, location)) or "config"
    if error["type"] != "extra_forbidden" or not location:
        return f"{where}: {error['msg']}"
    holder = model_at(model, location[:-1])
    close = close_keys(holder, str(location[-1])) if holder is not None else []
    if not close:
        return f"{where}: unknown key"
    return f"{where}: unknown key; did you mean {' or '.join(repr(name) for name in close)}?"
