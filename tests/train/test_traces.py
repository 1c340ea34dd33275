"""Teacher traces: the scripted expert with live tools, kept when correct, ready for SFT; mixing at a ratio."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.agent.types import Trajectory
from spacetools.bench.spatialsim.generator import generate_group, write_families
from spacetools.cli.main import app
from spacetools.toolshed import Toolshed
from spacetools.toolshed.toolsets import get_toolset
from spacetools.train.config import TracesConfig
from spacetools.train.traces import collect_traces_async, kept_metric, mix_traces, rejection


def test_the_expert_s_correct_episodes_become_sft_rows(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_families(data, {"cvb3ddepth": generate_group(3, "cvb3ddepth", 0, 3)})
    config = TracesConfig(data=data, out=tmp_path / "traces.jsonl")

    async def run() -> dict[str, dict[str, int]]:
        deployments = [d.model_copy(update={"backend": "inprocess"}) for d in get_toolset("v1")]
        async with Toolshed(deployments) as tools:
            return await collect_traces_async(config, tools=tools)

    counts = asyncio.run(run())
    rows = [json.loads(line) for line in config.out.read_text().splitlines()]
    assert sum(counts["cvb3ddepth"].values()) == 3
    assert len(rows) == counts["cvb3ddepth"].get("kept", 0) > 0
    for row in rows:
        assert row["score"] == 1.0 and row["teacher"] == "scripted" and row["family"] == "cvb3ddepth"
        roles = [message["role"] for message in row["messages"]]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant" and "tool" in roles
        assert len(row["images"]) == 1 and row["images"][0].startswith("data:image/png;base64,")
        assert "half_extents" not in json.dumps(row["messages"])  # the scene spec never reaches the data


def _trajectory(**changes: object) -> Trajectory:
    base = Trajectory(
        task_id="t",
        data_source="spatialsim_cvb3ddepth",
        messages=[{"role": "assistant", "content": "<think>close</think>\n<answer>(A)</answer>"}],
        tool_calls=[],
        answer="(A)",
        turns=1,
        score={"score": 1.0},
        parse_errors=0,
        stats={},
        wall_s=0.0,
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, None),
        ({"score": {"score": 0.0}}, "wrong"),
        ({"answer": None}, "no answer"),
        ({"error": "boom"}, "error"),
        ({"fallback": True}, "fallback guess"),  # the recorded flag decides, whatever the text says
        (
            {
                "messages": [
                    {"role": "assistant", "content": "<think>Fallback guess: x</think><answer>(A)</answer>"}
                ]
            },
            None,
        ),
    ],
)
def test_an_episode_is_kept_only_when_correct_answered_and_measured(
    changes: dict[str, object], reason: str | None
) -> None:
    assert rejection(_trajectory(**changes), threshold=1.0) == reason


def test_pointing_traces_are_kept_on_points_inside_the_mask_not_on_the_dense_reward() -> None:
    # A guess near the object but outside its mask: NNDC 0.6 passed the old 0.5 threshold.
    near_miss = _trajectory(data_source="spatialsim_reflocation", score={"score": 0.6, "acc": 0.0})
    metric = kept_metric("spatialsim_reflocation")
    assert metric == "acc" and kept_metric("spatialsim_cvb2drelation") == "score"
    assert rejection(near_miss, threshold=1.0, metric=metric) == "wrong"
    inside = _trajectory(data_source="spatialsim_reflocation", score={"score": 0.3, "acc": 1.0})
    assert rejection(inside, threshold=1.0, metric=metric) is None


def test_sources_mix_at_their_weights_without_repeating_rows(tmp_path: Path) -> None:
    irl, universal = tmp_path / "irl.jsonl", tmp_path / "universal.jsonl"
    irl.write_text("".join(json.dumps({"id": f"i{k}"}) + "\n" for k in range(5)))
    universal.write_text("".join(json.dumps({"id": f"u{k}"}) + "\n" for k in range(9)))
    taken = mix_traces({irl: 1, universal: 3}, tmp_path / "mix.jsonl", seed=0)
    assert taken == {str(irl): 3, str(universal): 9}
    ids = [json.loads(line)["id"] for line in (tmp_path / "mix.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 12


def test_an_empty_source_is_left_out_of_the_mix_and_all_empty_is_an_error(tmp_path: Path) -> None:
    irl, universal = tmp_path / "irl.jsonl", tmp_path / "universal.jsonl"
    irl.write_text("")
    universal.write_text("".join(json.dumps({"id": f"u{k}"}) + "\n" for k in range(4)))
    taken = mix_traces({irl: 1, universal: 3}, tmp_path / "mix.jsonl", seed=0)
    assert taken == {str(irl): 0, str(universal): 4}
    universal.write_text("")
    with pytest.raises(ValueError, match="every source is empty"):
        mix_traces({irl: 1, universal: 3}, tmp_path / "mix.jsonl", seed=0)


def test_a_mix_with_empty_thoughts_keeps_every_turn_but_the_teachers_reasoning(tmp_path: Path) -> None:
    turns = [
        {"role": "user", "content": "<think>the user's text stays</think> Where is the mug?"},
        {"role": "assistant", "content": '<think>Find it.</think>\n<tool_call>{"name": "a.b"}</tool_call>'},
        {"role": "tool", "content": "<tool_response>\nat (0.4, 0.5)\n</tool_response>"},
        {
            "role": "assistant",
            "content": "<think>It is at (0.4, 0.5).</think>\n<answer>[(0.4, 0.5)]</answer>",
        },
    ]
    source = tmp_path / "universal.jsonl"
    source.write_text(json.dumps({"id": "u0", "messages": turns}) + "\n")
    full, empty = tmp_path / "full" / "mix.jsonl", tmp_path / "empty" / "mix.jsonl"
    mix_traces({source: 1}, full, seed=0)
    mix_traces({source: 1}, empty, seed=0, thoughts="empty")
    assert json.loads(full.read_text())["messages"] == turns
    stripped = json.loads(empty.read_text())["messages"]
    assert [m["content"] for m in stripped] == [
        turns[0]["content"],
        '<think></think>\n<tool_call>{"name": "a.b"}</tool_call>',
        turns[2]["content"],
        "<think></think>\n<answer>[(0.4, 0.5)]</answer>",
    ]


def test_the_mix_command_writes_into_a_new_folder_with_empty_thoughts(tmp_path: Path) -> None:
    turn = "<think>It is at (0.4, 0.5).</think>\n<answer>Yes</answer>"
    source = tmp_path / "universal.jsonl"
    source.write_text(json.dumps({"id": "u0", "messages": [{"role": "assistant", "content": turn}]}) + "\n")
    out = tmp_path / "new" / "folder" / "mix.jsonl"
    arguments = ["train", "mix", "--source", f"{source}=1", "--out", str(out), "--thoughts", "empty"]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["messages"][0]["content"] == "<think></think>\n<answer>Yes</answer>"
