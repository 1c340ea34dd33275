"""One converter from a trajectory's messages to chat messages, for every policy that talks to a model.

An episode's messages (see :class:`~spacetools.agent.types.EpisodeState`) hold image parts
``{"type": "image", "index": i}`` that address the conversation's images, and ``tool`` messages whose
text is a ``<tool_response>`` block. A chat endpoint or a processor's chat template wants its own image
parts, and, unless its template renders the ``tool`` role itself, the tag protocol's form: a run of
tool responses is one ``user`` turn of ``<tool_response>`` blocks, as Qwen2.5's template renders it.

Which pictures a model sees is decided where the messages are written: the rollout puts a tool's
pictures into its message only with ``show_tool_images`` (off by default, as in the original's RL and
evaluation), so the converted chat is text-only for tool results unless that is set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"
ROLES = ("system", "user", "assistant", "tool")

ImagePart = Callable[[int], dict[str, Any]]
"""Makes the chat part of conversation image ``i`` (and may record it, e.g. in prompt order)."""


def strip_tool_response(text: str) -> str:
    """The body of a ``<tool_response>…</tool_response>`` block (the text itself when it is not one)."""
    stripped = text.strip()
    if stripped.startswith(TOOL_RESPONSE_OPEN) and stripped.endswith(TOOL_RESPONSE_CLOSE):
        return stripped[len(TOOL_RESPONSE_OPEN) : -len(TOOL_RESPONSE_CLOSE)].strip("\n")
    return text


def wrap_tool_response(text: str) -> str:
    """``text`` as one ``<tool_response>`` block, never wrapped twice."""
    return f"{TOOL_RESPONSE_OPEN}\n{strip_tool_response(text)}\n{TOOL_RESPONSE_CLOSE}"


def to_chat_messages(
    messages: Sequence[dict[str, Any]],
    image_count: int,
    image_part: ImagePart,
    *,
    native_tool_role: bool = False,
    plain_text: bool = False,
) -> list[dict[str, Any]]:
    """The episode's ``messages`` as chat messages.

    Args:
        messages: The episode's messages.
        image_count: How many conversation images there are (image indices are checked against it).
        image_part: Makes the chat part of image ``i``, called in prompt order.
        native_tool_role: Keep ``tool`` messages (their text without the ``<tool_response>`` tags, which
            the template adds); otherwise consecutive tool messages become one ``user`` message of
            ``<tool_response>`` blocks separated by a newline.
        plain_text: A message whose content is a string keeps it as a string (what chat endpoints take
            for system and assistant turns), gathered tool turns excepted; otherwise every content is a
            list of parts.

    Raises:
        ValueError: an unknown role, an unsupported part, or an image index out of range.
    """
    conversation: list[dict[str, Any]] = []
    tool_turn: dict[str, Any] | None = None  # the user message that gathers consecutive tool results
    for position, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLES:
            raise ValueError(f"message {position}: unknown role {role!r}")
        parts = _parts(message.get("content", ""), position, role == "tool", native_tool_role)
        _check_images(parts, position, image_count)
        parts = [image_part(part["index"]) if part["type"] == "image" else part for part in parts]
        if role != "tool" or native_tool_role:
            keep_string = plain_text and isinstance(message.get("content", ""), str)
            conversation.append({"role": role, "content": parts[0]["text"] if keep_string else parts})
            tool_turn = None
        elif tool_turn is None:
            tool_turn = {"role": "user", "content": parts}
            conversation.append(tool_turn)
        else:
            tool_turn["content"].extend([{"type": "text", "text": "\n"}, *parts])
    return conversation


def _parts(content: Any, position: int, is_tool: bool, native_tool_role: bool) -> list[dict[str, Any]]:
    """The message's content as text and image parts; tool texts wrapped or unwrapped as asked."""
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise ValueError(f"message {position}: content must be a string or a list of parts")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            text = str(part.get("text", ""))
            if is_tool:
                text = strip_tool_response(text) if native_tool_role else wrap_tool_response(text)
            parts.append({"type": "text", "text": text})
        elif kind == "image":
            parts.append({"type": "image", "index": part.get("index")})
        else:
            raise ValueError(f"message {position}: unsupported content part {part!r}")
    return parts


def _check_images(parts: list[dict[str, Any]], position: int, image_count: int) -> None:
    for part in parts:
        index = part.get("index")
        if part["type"] == "image" and not (
            isinstance(index, int) and not isinstance(index, bool) and 0 <= index < image_count
        ):
            raise ValueError(
                f"message {position}: image index {index!r} is out of range ({image_count} images)"
            )
