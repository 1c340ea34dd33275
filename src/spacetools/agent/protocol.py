"""The tag protocol between a model and the tools: system prompt, user message, turn parsing, tool responses.

A model reasons in ``<think>…</think>``, calls tools with
``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` (Qwen2.5's hermes format, several per turn) and
ends with ``<answer>…</answer>``. Each tool result goes back to the model as one ``tool`` message
``<tool_response>…</tool_response>``, cut in the middle when it is too long.

Parsing never raises, whatever the model wrote (numbers of any length, nesting of any depth, lone
surrogates, megabytes of text), and takes time linear in the turn's length: every malformed
``<tool_call>`` block becomes a :class:`ParseError` whose message the rollout sends back to the model in
that block's place. The final answer is read by :func:`spacetools.rewards.extraction.extract_answer`,
the same reader the scorer uses.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spacetools.kit.definition import hermes_tools_block
from spacetools.rewards.extraction import extract_answer

if TYPE_CHECKING:
    from spacetools.kit.definition import ToolResult, ToolSpec

DEFAULT_MAX_TOOL_RESPONSE_CHARS = 2048
TOOLS_PLACEHOLDER = "{tools}"

PROMPT_INTRO = """\
You are a spatial reasoning assistant. You answer questions about images precisely, with metric \
and geometric care, and you may use vision and robot tools to measure what you cannot judge by eye.

How to respond, in every turn:
1. First reason step by step inside <think>...</think>.
"""
"""The opening of every system prompt (tag protocol and native function calling alike)."""

PROMPT_ANSWER_AND_CONVENTIONS = """\
3. When you know the answer, write it inside <answer>...</answer>, exactly in the format the question \
asks for. A turn that contains an answer ends the conversation, so never answer and call tools in \
the same turn.

Conventions:
- image_index 0 is the user's image; images that tools return get the next indices, as their \
responses say.
- Image coordinates are normalized: x from left to right and y from top to bottom, both in [0, 1].
- Tools store large results (masks, depth maps, point clouds, poses) as named variables. Pass them to \
later tools by writing the name with a leading dollar sign as the argument value, e.g. "$point_cloud".
- If a tool returns an error, read it and fix the call or try another approach.
"""
"""How to answer and the conventions of images, coordinates and variables, shared by every prompt."""

DEFAULT_SYSTEM_PROMPT = (
    PROMPT_INTRO
    + """\
2. To use tools, write one or more calls, each inside its own <tool_call>...</tool_call> tags as a \
JSON object {"name": <tool name>, "arguments": <object of arguments>}. Calls in the same turn run \
in parallel; their results come back in order, each inside <tool_response>...</tool_response>.
"""
    + PROMPT_ANSWER_AND_CONVENTIONS
    + """
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
{tools}

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>"""
)

_TAGS = ("think", "tool_call", "answer")
_TAG_RE = re.compile(r"<(/?)(think|tool_call|answer)>", re.IGNORECASE)
_CODE_FENCE = "```"
# How much of a bad block to quote back to the model: enough to recognise it, never a flood.
_QUOTE_CHARS = 200


@dataclass(frozen=True)
class ToolCall:
    """A well-formed tool call; ``index`` is its position among the turn's ``<tool_call>`` blocks."""

    index: int
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParseError:
    """A ``<tool_call>`` block (at ``index``) that could not be run, and the message for the model."""

    index: int
    kind: str
    message: str


@dataclass
class ParsedTurn:
    """One assistant turn, split into its parts. ``errors`` are malformed tool-call blocks."""

    think: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    errors: list[ParseError] = field(default_factory=list)

    @property
    def block_count(self) -> int:
        """How many ``<tool_call>`` blocks the turn had, well-formed or not."""
        return len(self.tool_calls) + len(self.errors)


def build_system_prompt(specs: Sequence[ToolSpec], template: str | Path | None = None) -> str:
    """The system prompt with the hermes ``<tools>`` block for ``specs``.

    ``template`` is the prompt text, or a :class:`~pathlib.Path` to a file holding it, so a model can
    be run with the exact prompt it was trained with. ``{tools}`` in it is replaced by the tools block;
    a template without it is used verbatim.
    """
    if template is None:
        text = DEFAULT_SYSTEM_PROMPT
    elif isinstance(template, Path):
        text = read_prompt_template(template)
    else:
        text = template
    # ``str.replace``, not ``str.format``: prompts are full of JSON braces.
    if TOOLS_PLACEHOLDER not in text:
        return text
    return text.replace(TOOLS_PLACEHOLDER, hermes_tools_block(list(specs)))


def read_prompt_template(path: Path) -> str:
    """The text of a system prompt template file, with a clear error when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the system prompt template {path}: {exc}") from exc


def build_user_message(question: str, image_count: int = 1) -> dict[str, Any]:
    """The first user message: the task's images (indices 0…n-1) followed by the question."""
    parts: list[dict[str, Any]] = [{"type": "image", "index": i} for i in range(image_count)]
    parts.append({"type": "text", "text": question})
    return {"role": "user", "content": parts}


def truncate_middle(text: str, max_chars: int) -> str:
    """Cut ``text`` to at most ``max_chars`` characters by removing its middle.

    The head and tail are kept (where a tool's summary and its last numbers usually are) around a
    marker saying how many characters were removed.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    if len(text) <= max_chars:
        return text
    removed = len(text) - max_chars
    # The marker's length depends on the count it shows; two passes settle it.
    for _ in range(2):
        marker = f"…[truncated {removed} chars]…"
        kept = max_chars - len(marker)
        if kept < 2:
            return text[:max_chars]
        removed = len(text) - kept
    head = kept - kept // 2
    return text[:head] + f"…[truncated {removed} chars]…" + text[len(text) - kept // 2 :]


def format_tool_response(
    result: ToolResult | str,
    max_chars: int = DEFAULT_MAX_TOOL_RESPONSE_CHARS,
    *,
    image_indices: Sequence[int] = (),
) -> str:
    """Render a tool result (or an error string) as ``<tool_response>…</tool_response>``.

    ``image_indices`` are the conversation indices given to images the tool returned; they are named
    after the (possibly truncated) text so the model can pass them as ``image_index``.
    """
    text = result if isinstance(result, str) else result.text
    body = truncate_middle(text, max_chars)
    if image_indices:
        body += f"\n{image_note(image_indices)}"
    return f"<tool_response>\n{body}\n</tool_response>"


def image_note(image_indices: Sequence[int]) -> str:
    """The line telling the model which ``image_index`` the images a tool returned now have."""
    listed = ", ".join(str(i) for i in image_indices)
    return f"[The tool returned {len(image_indices)} image(s), now image_index {listed}.]"


def tool_message(
    result: ToolResult | str,
    max_chars: int = DEFAULT_MAX_TOOL_RESPONSE_CHARS,
    *,
    image_indices: Sequence[int] = (),
) -> dict[str, Any]:
    """One ``tool`` chat message; images the tool returned follow the text as image parts."""
    text = format_tool_response(result, max_chars, image_indices=image_indices)
    if not image_indices:
        return {"role": "tool", "content": text}
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts.extend({"type": "image", "index": i} for i in image_indices)
    return {"role": "tool", "content": parts}


def message_text(message: dict[str, Any]) -> str:
    """The text of a chat message, whether its content is a string or a list of parts."""
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


@dataclass(frozen=True)
class _Block:
    tag: str
    content: str
    closed: bool


def _split_blocks(text: str) -> list[_Block]:
    """The turn's tagged blocks, in order, in one linear pass.

    A block runs from its opening tag to the next matching closing tag, if that comes before the next
    opening tag of the same kind. An unclosed block (generation
    cut off, or a stop sequence that swallowed the closing tag) runs to the next opening tag or to the
    end of the text. Nested tags are not part of the protocol; the innermost text is taken literally.
    """
    opens: dict[str, list[tuple[int, int]]] = {tag: [] for tag in _TAGS}
    closes: dict[str, list[int]] = {tag: [] for tag in _TAGS}
    all_opens: list[int] = []
    for match in _TAG_RE.finditer(text):
        tag = match.group(2).lower()
        if match.group(1):
            closes[tag].append(match.start())
        else:
            opens[tag].append((match.start(), match.end()))
            all_opens.append(match.start())
    open_starts = {tag: [start for start, _ in opens[tag]] for tag in _TAGS}
    starts = sorted((start, end, tag) for tag in _TAGS for start, end in opens[tag])
    blocks: list[_Block] = []
    position = 0
    for start, end, tag in starts:
        if start < position:
            continue  # this opening tag sits inside the previous block
        close_at = bisect.bisect_left(closes[tag], end)
        same_open_at = bisect.bisect_left(open_starts[tag], end)
        next_same_open = open_starts[tag][same_open_at] if same_open_at < len(open_starts[tag]) else len(text)
        if close_at < len(closes[tag]) and closes[tag][close_at] < next_same_open:
            stop, closed = closes[tag][close_at], True
            position = stop + len(tag) + 3
        else:
            next_open = bisect.bisect_right(all_opens, start)
            stop = all_opens[next_open] if next_open < len(all_opens) else len(text)
            closed, position = False, stop
        blocks.append(_Block(tag, text[end:stop], closed))
    return blocks


def _quote(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "…"


def _unfenced(payload: str) -> str:
    """The JSON inside a markdown code fence (```json … ```), or ``payload`` as it is.

    String operations, not a regex: a lazy pattern before ``\\s*```$`` is quadratic on long runs of
    spaces.
    """
    if (
        len(payload) >= 2 * len(_CODE_FENCE)
        and payload.startswith(_CODE_FENCE)
        and payload.endswith(_CODE_FENCE)
    ):
        inner = payload[len(_CODE_FENCE) : -len(_CODE_FENCE)]
        return inner.removeprefix("json").strip()
    return payload


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {_quote(text)} is out of range")
    return value


def _load_json(payload: str) -> tuple[Any, str | None]:
    """The decoded value and None, or None and why the text is not (strict, finite) JSON.

    Catches every way the standard decoder gives up on hostile text: syntax, integers over Python's
    digit limit (ValueError), nesting deeper than the stack (RecursionError), NaN and Infinity.
    """
    try:
        return json.loads(payload, parse_constant=_reject_constant, parse_float=_finite_float), None
    except json.JSONDecodeError as exc:
        return None, exc.msg
    except RecursionError:
        return None, "nested too deeply"
    except ValueError as exc:
        return None, str(exc).split(";")[0][:_QUOTE_CHARS]


def _parse_tool_call(index: int, body: str, tool_names: Collection[str] | None) -> ToolCall | ParseError:
    payload = _unfenced(body.strip())
    if not payload:
        return ParseError(index, "empty", "Error: empty <tool_call>; write a JSON object inside it.")
    call, problem = _load_json(payload)
    if problem is not None:
        return ParseError(
            index, "bad_json", f"Error: the tool call is not valid JSON ({problem}): {_quote(payload)}"
        )
    if not isinstance(call, dict):
        return ParseError(
            index,
            "not_object",
            'Error: a tool call must be a JSON object {"name": …, "arguments": {…}}, '
            f"got {type(call).__name__}.",
        )
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return ParseError(index, "missing_name", 'Error: the tool call has no "name" string.')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        # Some models write the arguments object as a JSON string; accept it when it decodes.
        if not arguments.strip():
            arguments = {}
        else:
            decoded, problem = _load_json(arguments)
            if problem is None:
                arguments = decoded
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ParseError(
            index,
            "bad_arguments",
            f'Error: "arguments" of {_quote(name)} must be a JSON object, got {type(arguments).__name__}.',
        )
    if tool_names is not None and name not in tool_names:
        return ParseError(
            index, "unknown_tool", f"Error: unknown tool {_quote(name)!r}; use one of the listed tools."
        )
    return ToolCall(index, name, arguments)


def parse_turn(text: str, tool_names: Collection[str] | None = None) -> ParsedTurn:
    """Split an assistant turn into thinking, tool calls, answer and malformed tool-call blocks.

    ``tool_names``, when given, turns calls to any other tool into ``unknown_tool`` errors. The answer
    is what :func:`~spacetools.rewards.extraction.extract_answer` reads from a tag (the last complete
    ``<answer>`` pair, else one cut off at the end); untagged text is no answer here, though the scorer
    falls back to it. Never raises, and is linear in the length of ``text``.
    """
    if not isinstance(text, str):
        return ParsedTurn(think=None)
    thinks: list[str] = []
    calls: list[ToolCall] = []
    errors: list[ParseError] = []
    block_index = 0
    for block in _split_blocks(text):
        if block.tag == "think":
            thinks.append(block.content.strip())
        elif block.tag == "tool_call":
            parsed = _parse_tool_call(block_index, block.content, tool_names)
            if isinstance(parsed, ToolCall):
                calls.append(parsed)
            else:
                errors.append(parsed)
            block_index += 1
    answer = extract_answer(text)
    return ParsedTurn(
        think="\n".join(thinks) if thinks else None,
        tool_calls=calls,
        answer=answer.text if answer.source in ("tag", "unclosed_tag") else None,
        errors=errors,
    )


_THINK_RE = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)


def without_thoughts(text: str) -> str:
    """The turn with the text of its ``<think>`` blocks removed; the tags, calls and answer stay."""
    return _THINK_RE.sub("<think></think>", text)
