"""One answer reader: the rollout's final answer, the scorer's and the report's agree on every output,
including the shapes on which they used to disagree."""

from __future__ import annotations

import pytest

from spacetools.agent.protocol import parse_turn
from spacetools.rewards import compute_score, extract_answer

CALL = '<tool_call>{"name": "echo.echo", "arguments": {"text": "hi"}}</tool_call>'

# output → (the answer every reader takes, how it was found)
CASES: dict[str, tuple[str, str]] = {
    # An answer written inside the thinking still ends the episode (the original scorer's regex reads it).
    "<think>I'd say <answer>No</answer></think>": ("No", "tag"),
    # Nested opening tags: the innermost pair.
    "<answer>Yes<answer>No</answer></answer>": ("No", "tag"),
    "<answer><answer>No</answer>": ("No", "tag"),
    # Two answers: the last complete one.
    "<answer>Yes</answer> on second thought <answer>No</answer>": ("No", "tag"),
    "<answer>Yes</answer><answer>cut o": ("Yes", "tag"),
    # An answer beside a tool call, before or after it.
    CALL + "<answer>No</answer>": ("No", "tag"),
    "<answer>No</answer>" + CALL: ("No", "tag"),
    # Cut off at the token limit.
    "<think>so</think><answer>No, it is": ("No, it is", "unclosed_tag"),
    # An opening tag mentioned in the thinking is not an answer.
    "<think>I could write <answer> now.</think>" + CALL: ("", "none"),
    "<think>or <answer>.</think>Yes": ("Yes", "untagged"),
    # Stray tags do not reach the answer text.
    "<answer>No</think></answer>": ("No", "tag"),
}


@pytest.mark.parametrize("output", list(CASES))
def test_rollout_scorer_and_reader_agree(output: str) -> None:
    text, source = CASES[output]
    assert (extract_answer(output).text, extract_answer(output).source) == (text, source)
    assert parse_turn(output).answer == (text if source in ("tag", "unclosed_tag") else None)
    score = compute_score("robospatial", output, "No")
    assert score["score"] == float(text.lower().startswith("no"))
    assert score["answer_tagged"] == (source == "tag")


def test_an_answer_beside_a_call_keeps_the_call() -> None:
    parsed = parse_turn("<think>x</think>" + CALL + "<answer>No</answer>")
    assert parsed.answer == "No" and [call.name for call in parsed.tool_calls] == ["echo.echo"]
