"""A call's arguments, from what the model wrote to validated keyword arguments and a seed.

The arguments are read (JSON text or an object), checked for shape (nesting and size: the walk stops
at the first container past `MAX_ARGUMENT_DEPTH` and past `MAX_ARGUMENT_ELEMENTS` values), their
`"$name"` references resolved against values the caller looked up, validated against the tool method,
and given an identity from which the call's seed is drawn. Each step costs time in the arguments' size,
so the Toolshed runs them off the event loop unless they are small (`is_small`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from spacetools.kit.definition import ToolError, ToolMethod
from spacetools.toolshed.session import SessionState
from spacetools.toolshed.variables import REFERENCE, resolve_references

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_ARGUMENT_ELEMENTS",
    "Arguments",
    "call_seed",
    "is_small",
    "read_arguments",
    "resolve_and_validate",
]

Arguments = Mapping[str, Any] | str | None

#: No tool takes arguments nested deeper; deeper ones come from degenerate model output.
MAX_ARGUMENT_DEPTH = 32
#: Values (containers and scalars) one call's arguments may hold: a few thousand points at most in a
#: real call; past this the walk, the validation and the seed would cost seconds of server time.
MAX_ARGUMENT_ELEMENTS = 100_000


#: Arguments with at most this many values, and no text or array bigger than `_SMALL_BYTES`, are read
#: on the event loop: a thread's round trip would cost more than they do.
_SMALL_VALUES = 256
_SMALL_BYTES = 16 * 2**10
_PLAIN_NUMBERS = frozenset({int, float, bool, type(None)})


def is_small(value: Any) -> bool:
    """Whether `value` is cheap to read, walk and validate (at most `_SMALL_VALUES` values looked at)."""
    stack, budget = [value], _SMALL_VALUES
    while stack:
        item = stack.pop()
        budget -= 1
        if budget < 0:
            return False
        if type(item) in _PLAIN_NUMBERS:  # the common case first: no abstract class to ask
            continue
        if isinstance(item, dict | list | tuple | Mapping):
            if len(item) > budget:
                return False
            stack.extend(item.values() if isinstance(item, dict | Mapping) else item)
        elif isinstance(item, str | bytes | np.ndarray):
            if _byte_size(item) > _SMALL_BYTES:
                return False
        elif not isinstance(item, int | float | None | np.generic):  # of unknown cost to check
            return False
    return True


def _byte_size(item: str | bytes | np.ndarray) -> int:
    return item.nbytes if isinstance(item, np.ndarray) else len(item)


def read_arguments(name: str, arguments: Arguments) -> tuple[dict[str, Any], list[str]]:
    """The call's arguments as an object, checked for shape, and the variables they reference.

    `ToolError` for text that is not JSON, for anything but an object, for nesting deeper than
    `MAX_ARGUMENT_DEPTH` and for more than `MAX_ARGUMENT_ELEMENTS` values.
    """
    if arguments is None:
        return {}, []
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        # ValueError: an integer of more digits than Python converts; RecursionError: deep nesting.
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise ToolError(f"the arguments for {name} are not valid JSON: {reason}") from None
    if not isinstance(arguments, Mapping):
        raise ToolError(f"the arguments for {name} must be a JSON object, got {type(arguments).__name__}")
    if not arguments:  # a method without arguments: nothing to walk
        return {}, []
    return dict(arguments), _shape_and_references(name, arguments)


def _shape_and_references(name: str, arguments: Mapping[str, Any]) -> list[str]:
    """The variables the arguments reference (`"$name"` strings, in order of appearance), found in
    one walk that checks their shape: `ToolError` at the first container nested deeper than
    `MAX_ARGUMENT_DEPTH`, or at the container whose values take the count past
    `MAX_ARGUMENT_ELEMENTS`. The walk is iterative and in document order, since the input may be
    hostile; it visits only containers and `$` strings (numbers and plain text need no look)."""
    names: list[str] = []
    seen = 1
    stack: list[tuple[Any, int]] = [(arguments, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):  # only `$` strings are stacked
            match = REFERENCE.match(item)
            if match:
                names.append(match.group(1))
            continue
        if depth > MAX_ARGUMENT_DEPTH:
            raise ToolError(f"the arguments for {name} are nested deeper than {MAX_ARGUMENT_DEPTH} levels")
        children = list(item.values()) if isinstance(item, Mapping) else item
        seen += len(children)
        if seen > MAX_ARGUMENT_ELEMENTS:
            raise ToolError(
                f"the arguments for {name} hold more than {MAX_ARGUMENT_ELEMENTS:,} values; pass large "
                "data as a variable"
            )
        inner = depth + 1
        for child in reversed(children):
            kind = type(child)
            if kind in _PLAIN_NUMBERS:  # the common case first: no abstract class to ask
                continue
            if kind is str or isinstance(child, str):  # numpy's str_ too
                if child.startswith("$"):
                    stack.append((child, depth))
            elif kind is list or kind is dict or isinstance(child, list | tuple | Mapping):
                stack.append((child, inner))
    return names


def resolve_and_validate(
    method: ToolMethod, raw: dict[str, Any], values: dict[str, Any], identity_head: list[Any]
) -> tuple[dict[str, Any], str]:
    """The validated keyword arguments (references replaced by `values`) and the call's identity text,
    from which its seed is drawn (the arguments as the model wrote them, so that seeds do not depend
    on variable contents)."""
    kwargs = method.validate(resolve_references(raw, values.__getitem__) if values else raw)
    return kwargs, _IDENTITY.encode([*identity_head, raw])


def call_seed(state: SessionState, identity: str) -> int:
    """A stable seed from the call's identity and how often it was made before in the session.

    Results then depend neither on scheduling nor on the process that runs the call.
    """
    repeats = state.call_repeats
    repeat = repeats[identity]
    repeats[identity] = repeat + 1
    return int.from_bytes(hashlib.sha256(f"{identity}#{repeat}".encode()).digest()[:8], "little")


def _digest(value: Any) -> str:
    """Canonical text for values JSON cannot write (arrays passed by value from Python)."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return f"ndarray:{data.dtype}:{data.shape}:{hashlib.sha256(data.tobytes()).hexdigest()}"
    if isinstance(value, np.generic):
        return repr(value.item())
    return repr(value)


#: Writes a call's identity (what `json.dumps` with these options writes, without building an encoder
#: object per call). The public encoder, not `_json.make_encoder`: the private one saved ~60 bytecodes a
#: call (3% of the in-process path) at the price of a CPython-internal signature.
_IDENTITY = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_digest)
