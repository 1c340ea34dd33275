"""The rollout loop against a real, started Toolshed serving the diagnostic tools in-process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pytest

from spacetools.agent.policies.openai import OpenAIPolicy
from spacetools.agent.policies.replay import ReplayExhaustedError, ReplayPolicy, rescore
from spacetools.agent.protocol import message_text
from spacetools.agent.rollout import RolloutConfig, run_episode, run_episodes
from spacetools.agent.types import (
    EpisodeInput,
    EpisodeState,
    Task,
    Trajectory,
    read_trajectories,
    write_trajectories,
)
from spacetools.kit.definition import Tool, ToolContext, ToolResult, tool_method
from spacetools.tools.diagnostics import EchoTool, SleepTool
from spacetools.toolshed import ToolDeployment, Toolshed

if TYPE_CHECKING:
    from chat_server import ScriptedChatServer as ChatServer

T = TypeVar("T")
IMAGE = np.zeros((8, 10, 3), dtype=np.uint8)


class SnapshotTool(Tool):
    """Returns a picture, as a camera or a visualizing tool would."""

    name = "snapshot"

    @tool_method
    def take(self, shade: int) -> ToolResult:
        """Return a flat grey picture.

        Args:
            shade: The grey level (0 to 255).
        """
        return ToolResult(
            text=f"picture of shade {shade}", images=[np.full((4, 4, 3), shade, dtype=np.uint8)]
        )


DEPLOYMENTS = [
    ToolDeployment(tool=EchoTool, instances=2, backend="inprocess"),
    ToolDeployment(tool=SleepTool, instances=4, backend="inprocess"),
    ToolDeployment(tool=SnapshotTool, backend="inprocess"),
]


class ScriptPolicy:
    """Writes the given turns in order (then keeps repeating the last), recording what it saw."""

    name = "script"

    def __init__(self, turns: Sequence[str], delay_s: float = 0.0) -> None:
        self.turns = list(turns)
        self.delay_s = delay_s
        self.seen_turns: list[int] = []
        self.active = 0
        self.most_active = 0

    async def act(self, state: EpisodeState) -> str:
        self.seen_turns.append(state.turn)
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.active -= 1
        return self.turns[min(state.turn, len(self.turns) - 1)]


class BrokenPolicy:
    name = "broken"

    async def act(self, state: EpisodeState) -> str:
        raise ConnectionError("endpoint unreachable")


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def task(task_id: str = "t1") -> Task:
    return Task(id=task_id, data_source="test", question="What is it?", images=[IMAGE])


def with_shed(body: Callable[[Toolshed], Awaitable[T]]) -> T:
    async def main() -> T:
        async with Toolshed(DEPLOYMENTS) as shed:
            return await body(shed)

    return asyncio.run(main())


def episode(policy: Any, **options: Any) -> Trajectory:
    return with_shed(lambda shed: run_episode(policy, shed, task(), **options))


def test_calls_of_a_turn_run_and_answer_ends_the_episode() -> None:
    policy = ScriptPolicy(
        [
            "<think>look</think>" + call("echo.echo", text="one") + call("sleep.sleep", seconds=0.01),
            "<think>done</think><answer>(A)</answer>",
        ]
    )
    result = episode(policy, scorer=lambda text: {"score": float("<answer>(A)</answer>" in text)})
    assert (result.finish_reason, result.answer, result.turns, result.error) == ("answer", "(A)", 2, None)
    assert [m["role"] for m in result.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert (
        "<tools>" in result.messages[0]["content"]
        and '"name": "sleep.sleep"' in result.messages[0]["content"]
    )
    assert [message_text(m) for m in result.messages[3:5]] == [
        "<tool_response>\none\n</tool_response>",
        "<tool_response>\nslept 0.01 s\n</tool_response>",
    ]
    assert [(c.name, c.arguments, c.is_error, c.turn) for c in result.tool_calls] == [
        ("echo.echo", {"text": "one"}, False, 1),
        ("sleep.sleep", {"seconds": 0.01}, False, 1),
    ]
    assert result.tool_calls[1].latency_s >= 0.01  # each call is timed on its own
    assert result.score == {"score": 1.0}
    assert result.stats["tool_calls_by_name"] == {"echo.echo": 1, "sleep.sleep": 1}
    assert result.stats["tools_s"] > 0 and result.wall_s >= result.stats["tools_s"]
    assert policy.seen_turns == [0, 1]


def test_malformed_output_is_answered_with_errors_and_counted() -> None:
    flood = "<tool_call>{" + "x" * 100_000
    turns = [
        call("echo.echo", text="fine")
        + "<tool_call>{not json}</tool_call>"
        + call("nope.missing")
        + call("sleep.sleep", seconds="long"),  # wrong type: the Toolshed's validation answers
        flood,
        "I think the answer is A.",  # no tool call, no answer: the episode ends without an answer
    ]
    result = episode(ScriptPolicy(turns))
    assert (result.finish_reason, result.answer, result.turns, result.error) == (
        "no_tool_call",
        None,
        3,
        None,
    )
    assert result.parse_errors == 4
    assert result.stats["parse_errors_by_kind"] == {"bad_json": 2, "unknown_tool": 1, "no_answer": 1}
    assert result.stats["invalid_turns"] == 3  # one bad call spoils a turn; a flood is one bad turn
    responses = [message_text(m) for m in result.messages if m["role"] == "tool"]
    assert len(responses) == 5
    assert responses[0] == "<tool_response>\nfine\n</tool_response>"
    assert "not valid JSON" in responses[1] and "unknown tool 'nope.missing'" in responses[2]
    assert responses[3].startswith("<tool_response>\nError: ") and "seconds" in responses[3]
    assert "not valid JSON" in responses[4] and len(responses[4]) < 500
    assert result.stats["tool_errors"] == 1 and result.stats["tool_errors_by_name"] == {"sleep.sleep": 1}


def test_an_answer_next_to_tool_calls_ends_the_episode_unrun() -> None:
    result = episode(ScriptPolicy([call("sleep.sleep", seconds=5) + "<answer>Yes</answer>"]))
    assert (result.finish_reason, result.answer, result.tool_calls) == ("answer", "Yes", [])
    assert result.stats["skipped_tool_calls"] == 1


def test_turn_limit_and_per_turn_call_limit() -> None:
    result = episode(ScriptPolicy([call("echo.echo", text="a") * 3]), max_turns=3, max_tool_calls_per_turn=2)
    assert (result.finish_reason, result.turns, result.answer) == ("max_turns", 3, None)
    assert len(result.tool_calls) == 6
    assert result.stats["parse_errors_by_kind"] == {"too_many_calls": 3}
    assert result.stats["invalid_turns"] == 0  # well-formed calls past the limit are not the model's syntax


def test_long_responses_are_cut_in_the_middle() -> None:
    text = "START" + "y" * 5000 + "END"
    result = episode(
        ScriptPolicy([call("echo.echo", text=text), "<answer>ok</answer>"]), max_tool_response_chars=300
    )
    response = message_text(result.messages[3])
    assert response.startswith("<tool_response>\nSTART") and response.endswith("END\n</tool_response>")
    assert "truncated" in response and len(response) <= 300 + len("<tool_response>\n\n</tool_response>")
    assert result.tool_calls[0].result_text == text  # the record keeps the full text


@pytest.mark.parametrize("show", [True, False])
def test_tool_images_are_recorded_and_shown_on_request(show: bool) -> None:
    policy = ScriptPolicy([call("snapshot.take", shade=7), "<answer>grey</answer>"])
    result = episode(policy, show_tool_images=show)
    assert len(result.images) == 1 and int(result.images[0][0, 0, 0]) == 7
    assert result.task_image_count == 1
    assert result.tool_calls[0].image_indices == [1]  # which call made which picture, for reports
    content = result.messages[3]["content"]
    if show:
        assert content[1] == {"type": "image", "index": 1} and "image_index 1" in content[0]["text"]
    else:
        assert content == "<tool_response>\npicture of shade 7\n</tool_response>"


def test_failures_end_the_episode_without_raising() -> None:
    broken = episode(BrokenPolicy())
    assert (broken.finish_reason, broken.turns) == ("policy_error", 0)
    assert broken.error == "ConnectionError: endpoint unreachable"

    def bad_scorer(text: str) -> dict[str, Any]:
        raise KeyError("ground truth")

    scored = episode(ScriptPolicy(["<answer>A</answer>"]), scorer=bad_scorer)
    assert scored.score is None and scored.error == "scorer failed: KeyError: 'ground truth'"


def test_custom_system_prompt_from_a_file(tmp_path: Path) -> None:
    template = tmp_path / "prompt.txt"
    template.write_text("Trained prompt.\n{tools}")
    results = with_shed(
        lambda shed: run_episodes(
            ScriptPolicy(["<answer>A</answer>"]), shed, [task()], system_prompt=template
        )
    )
    assert results[0].messages[0]["content"].startswith("Trained prompt.\n<tools>\n")


def test_many_episodes_run_concurrently_under_the_limit() -> None:
    policy = ScriptPolicy([call("sleep.sleep", seconds=0.01), "<answer>A</answer>"], delay_s=0.02)
    finished: list[str] = []
    tasks = [task(f"t{i}") for i in range(12)]
    results = with_shed(
        lambda shed: run_episodes(
            policy, shed, tasks, concurrency=4, on_result=lambda t: finished.append(t.task_id)
        )
    )
    assert [r.task_id for r in results] == [t.id for t in tasks]
    assert sorted(finished) == sorted(t.id for t in tasks)
    assert 1 < policy.most_active <= 4
    assert all(r.finish_reason == "answer" for r in results)


def test_replay_reruns_recorded_turns_against_live_tools_and_rescoring(tmp_path: Path) -> None:
    turns = [call("echo.echo", text="again"), "<answer>(B)</answer>"]
    recorded = [episode(ScriptPolicy(turns)), episode(ScriptPolicy(["<answer>(C)</answer>"]))]
    path = tmp_path / "recorded.jsonl"
    write_trajectories(recorded, path)
    replay = ReplayPolicy(path)
    assert replay.remaining("t1") == 2
    replayed = with_shed(lambda shed: run_episodes(replay, shed, [task(), task()], concurrency=2))
    assert sorted(r.answer or "" for r in replayed) == ["(B)", "(C)"]
    first = next(r for r in replayed if r.answer == "(B)")
    assert [m["content"] for m in first.messages] == [m["content"] for m in recorded[0].messages]
    assert replay.remaining("t1") == 0
    exhausted = episode(replay)
    assert exhausted.finish_reason == "policy_error" and "no (more) recorded" in (exhausted.error or "")

    rescored = rescore(read_trajectories(path), lambda t: {"score": float(t.answer == "(C)")})
    assert [t.score for t in rescored] == [{"score": 0.0}, {"score": 1.0}]


class GuessingPolicy:
    """Answers at once and marks the answer a guess after a failure, without a word of it in the text."""

    name = "guessing"

    async def act(self, state: EpisodeState) -> str:
        state.fallback = True
        return "<answer>(A)</answer>"


def test_a_marked_guess_is_recorded_written_read_and_replayed(tmp_path: Path) -> None:
    guessed = episode(GuessingPolicy())
    prose_only = episode(ScriptPolicy(["<think>Fallback guess: (A)</think><answer>(A)</answer>"]))
    assert (guessed.fallback, prose_only.fallback) == (True, False)  # the policy's flag, never its text
    path = tmp_path / "recorded.jsonl"
    write_trajectories([guessed, prose_only], path)
    assert [t.fallback for t in read_trajectories(path)] == [True, False]
    before_the_field = guessed.to_dict()
    del before_the_field["fallback"]
    assert Trajectory.from_dict(before_the_field).fallback is False
    replay = ReplayPolicy(path)
    assert [episode(replay).fallback for _ in range(2)] == [True, False]


def test_replay_stops_when_the_live_episode_outruns_the_recording() -> None:
    recorded = episode(ScriptPolicy([call("echo.echo", text="x"), "<answer>A</answer>"]))
    recorded.messages = recorded.messages[:4]  # keep only the first assistant turn
    result = episode(ReplayPolicy([recorded.to_dict()]))
    assert result.finish_reason == "policy_error"
    assert (result.error or "").startswith(ReplayExhaustedError.__name__)
    assert "asked for turn 2" in (result.error or "")


def test_openai_policy_drives_an_episode_end_to_end(chat: ChatServer) -> None:
    chat.script.extend([500, call("echo.echo", text="hello"), "<think>seen</think><answer>hello</answer>"])

    async def body(shed: Toolshed) -> Trajectory:
        policy = OpenAIPolicy(
            "m", base_url=chat.base_url, api_key_env="SPACETOOLS_TEST_NO_KEY", max_retries=2
        )
        try:
            return await run_episode(policy, shed, task())
        finally:
            await policy.aclose()

    result = with_shed(body)
    assert (result.finish_reason, result.answer, len(result.tool_calls)) == ("answer", "hello", 1)
    last = chat.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user"]
    assert last[-1]["content"] == [{"type": "text", "text": "<tool_response>\nhello\n</tool_response>"}]


def test_a_turn_without_call_or_answer_can_get_feedback_instead_of_ending() -> None:
    result = episode(ScriptPolicy(["It is A.", "<answer>A</answer>"]), feedback_on_no_answer=True)
    assert (result.finish_reason, result.answer, result.turns, result.parse_errors) == ("answer", "A", 2, 1)
    assert result.messages[3]["role"] == "user" and result.messages[3]["content"].startswith("Error: ")


def test_a_policy_past_its_time_limit_ends_the_episode() -> None:
    result = episode(ScriptPolicy(["<answer>late</answer>"], delay_s=5.0), policy_timeout_s=0.05)
    assert (result.finish_reason, result.answer) == ("policy_error", None)
    assert result.error == "TimeoutError: the policy took over 0.05 s"


HUGE_NUMBER_CALL = '<tool_call>{"name": "echo.echo", "arguments": {"text": ' + "1" * 4301 + "}}</tool_call>"
DEEP_ARGUMENTS_CALL = (
    '<tool_call>{"name": "echo.echo", "arguments": ' + "[" * 1000 + "]" * 1000 + "}</tool_call>"
)


class PerTaskPolicy:
    """Writes the turns scripted for each task id (hostile model output for some of them)."""

    name = "per-task"

    def __init__(self, turns: dict[str, list[str]]) -> None:
        self.turns = turns

    async def act(self, state: EpisodeState) -> str:
        if state.task.id == "raises":
            raise RuntimeError("the model server fell over")
        script = self.turns[state.task.id]
        return script[min(state.turn, len(script) - 1)]


def test_no_failure_inside_an_episode_loses_the_batch() -> None:
    """A parser choking on model text, a session that raises and a policy that raises each end only
    their own episode; the others finish normally, in task order."""
    policy = PerTaskPolicy(
        {
            "huge-number": [HUGE_NUMBER_CALL, "<answer>A</answer>"],
            "deep-arguments": [DEEP_ARGUMENTS_CALL, "<answer>B</answer>"],
            "fine": [call("echo.echo", text="x"), "<answer>C</answer>"],
        }
    )
    ids = ["huge-number", "raises", "deep-arguments", "fine"]
    results = with_shed(
        lambda shed: run_episodes(
            policy, shed, [task(i) for i in ids], scorers=[lambda t: {"score": 1.0}] * 4
        )
    )
    assert [r.task_id for r in results] == ids
    by_id = {r.task_id: r for r in results}
    assert (by_id["raises"].finish_reason, by_id["raises"].error) == (
        "policy_error",
        "RuntimeError: the model server fell over",
    )
    assert (by_id["fine"].finish_reason, by_id["fine"].answer, by_id["fine"].error) == ("answer", "C", None)
    for hostile in ("huge-number", "deep-arguments"):
        trajectory = by_id[hostile]
        # Either the parser refuses the block (an error response, the episode goes on) or the episode
        # ends with its own error; never an exception out of run_episodes.
        if trajectory.error is not None:
            assert trajectory.finish_reason in ("rollout_error", "toolshed_error")
            assert trajectory.messages[-1]["role"] == "assistant"
        else:
            assert trajectory.finish_reason == "answer" and trajectory.parse_errors >= 1
    assert all(r.score == {"score": 1.0} for r in results)


def test_an_input_carries_attachments_to_the_session_and_the_config_is_validated() -> None:
    class SceneTool(Tool):
        name = "scene"

        @tool_method
        def show(self, image_index: int = 0, *, ctx: ToolContext) -> ToolResult:
            """Say what the tools were given for an image.

            Args:
                image_index: The image.
            """
            return ToolResult(text=ctx.attachment(image_index)["scene"])

    async def body() -> Trajectory:
        async with Toolshed([ToolDeployment(tool=SceneTool, backend="inprocess")]) as shed:
            item = EpisodeInput(task(), attachments=[{"scene": '{"seed": 3}'}])
            policy = ScriptPolicy([call("scene.show"), "<answer>A</answer>"])
            return await run_episode(policy, shed, item, config=RolloutConfig(max_turns=2))

    result = asyncio.run(body())
    assert result.tool_calls[0].result_text == '{"seed": 3}'
    with pytest.raises(ValueError, match="max_turns"):
        RolloutConfig(max_turns=0)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        RolloutConfig().with_options(max_turn=3)
