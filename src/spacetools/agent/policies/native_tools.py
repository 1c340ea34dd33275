"""Native function calling for chat-completions endpoints: the tag protocol's turns in the API's form.

The rollout speaks the tag protocol: an assistant turn is text with ``<tool_call>`` blocks, and each
block is answered by one ``tool`` message. In native mode the policy translates both ways, so the
rollout, the trajectories and the scorers stay the same:

- the tools go in the request's ``tools`` parameter, named by :class:`FunctionNames` (dots are not
  allowed there), and the system prompt describes native calls instead of tags;
- a reply's ``tool_calls`` become ``<tool_call>`` blocks with the project's tool names
  (:meth:`NativeToolCalling.turn_text`);
- the history's ``<tool_call>`` blocks go back as ``tool_calls`` with ids, and each ``tool`` message
  answers its call by ``tool_call_id``. Images a tool returned follow as one user message, since
  ``tool`` messages carry text only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from spacetools.agent.protocol import PROMPT_ANSWER_AND_CONVENTIONS, PROMPT_INTRO
from spacetools.agent.types import EpisodeState
from spacetools.kit.definition import ToolSpec
from spacetools.kit.function_names import FUNCTION_NAME_RE, FunctionNames

NATIVE_SYSTEM_PROMPT = (
    PROMPT_INTRO
    + """\
2. To use tools, call one or more of the functions you are given. Calls in the same turn run in \
parallel.
"""
    + PROMPT_ANSWER_AND_CONVENTIONS.rstrip("\n")
)

_TOOL_CALL_BLOCK = re.compile(
    r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|$)", re.DOTALL | re.IGNORECASE
)
_TOOL_RESPONSE = re.compile(r"^<tool_response>\n?(.*?)\n?</tool_response>$", re.DOTALL)
_UNNAMED = "invalid_call"

ContentConverter = Callable[[str | list[dict[str, Any]]], str | list[dict[str, Any]]]


class NativeToolCalling:
    """The translation between the tag protocol and an API's native tool calls, for one tool set."""

    def __init__(self, specs: list[ToolSpec]) -> None:
        self.names = FunctionNames(spec.name for spec in specs)
        self.tools = [
            {
                "type": "function",
                "function": {
                    "name": self.names.to_wire(spec.name),
                    "description": spec.description,
                    "parameters": spec.parameters,
                },
            }
            for spec in specs
        ]

    def turn_text(self, content: str | None, tool_calls: list[Any] | None) -> str:
        """A reply (its text and its ``tool_calls``) as a tag-protocol turn the rollout parses."""
        text = content or ""
        for call in tool_calls or []:
            wire = call.function.name
            try:
                arguments: Any = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError:
                arguments = call.function.arguments  # the parser reports it to the model as bad arguments
            block = {"name": self.names.from_wire(wire) or wire, "arguments": arguments}
            text += f"\n<tool_call>\n{json.dumps(block)}\n</tool_call>"
        return text.strip()

    def messages(self, state: EpisodeState, content: ContentConverter) -> list[dict[str, Any]]:
        """The episode's messages in chat-completions form with native tool calls.

        ``content`` converts a message's content (text or parts) to the API's parts.
        """
        converted: list[dict[str, Any]] = []
        pending_ids: list[str] = []  # ids of the last assistant turn's calls not yet answered
        tool_images: list[dict[str, Any]] = []
        for position, message in enumerate(state.messages):
            role = message["role"]
            if role != "tool" and tool_images:
                converted.append(_images_message(tool_images))
                tool_images = []
            if role == "system":
                converted.append({"role": "system", "content": NATIVE_SYSTEM_PROMPT})
            elif role == "assistant":
                entry, pending_ids = self._assistant(message.get("content", ""), position)
                converted.append(entry)
            elif role == "tool":
                parts = content(message.get("content", ""))
                parts = [{"type": "text", "text": parts}] if isinstance(parts, str) else parts
                text = "".join(part["text"] for part in parts if part["type"] == "text")
                tool_images.extend(part for part in parts if part["type"] == "image_url")
                text = _TOOL_RESPONSE.sub(r"\1", text.strip())
                if pending_ids:
                    converted.append({"role": "tool", "tool_call_id": pending_ids.pop(0), "content": text})
                else:  # a response without a call to answer (e.g. model text with stray tags)
                    converted.append({"role": "user", "content": text})
            else:
                converted.append({"role": role, "content": content(message.get("content", ""))})
        if tool_images:
            converted.append(_images_message(tool_images))
        return converted

    def _assistant(self, text: str | list[dict[str, Any]], position: int) -> tuple[dict[str, Any], list[str]]:
        if not isinstance(text, str):
            text = "".join(part.get("text", "") for part in text if part.get("type") == "text")
        calls: list[dict[str, Any]] = []
        for index, match in enumerate(_TOOL_CALL_BLOCK.finditer(text)):
            name, arguments = _name_and_arguments(match.group(1))
            wire = self._wire_name(name)
            calls.append(
                {
                    "id": f"call_{position}_{index}",
                    "type": "function",
                    "function": {"name": wire, "arguments": arguments},
                }
            )
        entry: dict[str, Any] = {"role": "assistant", "content": _TOOL_CALL_BLOCK.sub("", text).strip()}
        if calls:
            entry["tool_calls"] = calls
        return entry, [call["id"] for call in calls]

    def _wire_name(self, name: str) -> str:
        try:
            return self.names.to_wire(name)
        except KeyError:  # an unknown tool: its name as written, if the API accepts it
            return name if FUNCTION_NAME_RE.match(name) else _UNNAMED


def _name_and_arguments(body: str) -> tuple[str, str]:
    """The name and the JSON arguments text of one ``<tool_call>`` block, as far as they can be read."""
    try:
        block = json.loads(body)
    except json.JSONDecodeError:
        return _UNNAMED, "{}"
    if not isinstance(block, dict):
        return _UNNAMED, "{}"
    name = block.get("name")
    arguments = block.get("arguments", {})
    return (
        name if isinstance(name, str) and name else _UNNAMED,
        arguments if isinstance(arguments, str) else json.dumps(arguments),
    )


def _images_message(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "The images the tools returned:"}, *parts]}
