"""A DIRL config trains only families its teacher can finish within its turn limits (and can imitate at all)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.agent.policies.scripted import ScriptedPolicy
from spacetools.agent.rollout import RolloutConfig, run_episodes
from spacetools.bench.dataset import episode_input, load_samples
from spacetools.bench.spatialsim import FAMILIES
from spacetools.bench.spatialsim.generator import generate_group, write_families
from spacetools.cli.main import app
from spacetools.rewards.benchmarks import benchmark
from spacetools.toolshed.shed import Toolshed
from spacetools.toolshed.toolsets import with_profile
from spacetools.train.config import DIRLConfig, load_config
from spacetools.train.limits import TEACHER_TURNS, UNTRAINABLE, turn_limit_problems

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.slow
def test_the_teacher_turn_table_holds_what_the_teacher_takes(tmp_path: Path) -> None:
    write_families(tmp_path, {family: generate_group(3, family, 0, 2) for family in FAMILIES})
    samples = load_samples(tmp_path)

    async def run() -> list[object]:
        async with Toolshed(with_profile("v1", "exact"), seed=0) as tools:
            inputs = [episode_input(sample, task_id) for task_id, sample in samples.items()]
            config = RolloutConfig(max_turns=12, concurrency=8)
            return list(await run_episodes(ScriptedPolicy(), tools, inputs, config=config))

    taken: dict[str, int] = {}
    for trajectory in asyncio.run(run()):
        family = benchmark(trajectory.data_source).family  # type: ignore[attr-defined]
        assert trajectory.answer is not None  # type: ignore[attr-defined]
        taken[family] = max(taken.get(family, 0), trajectory.turns)  # type: ignore[attr-defined]
    assert set(taken) == set(TEACHER_TURNS)
    assert all(taken[family] <= TEACHER_TURNS[family] for family in taken), taken
    assert taken["reflocation"] == taken["cvb2drelation"] == 2  # one tool call, then the answer


def test_blinkdepth_questions_do_not_give_the_points_its_teacher_reads(tmp_path: Path) -> None:
    write_families(tmp_path, {"blinkdepth": generate_group(0, "blinkdepth", 0, 2)})
    for sample in load_samples(tmp_path).values():
        assert sample.extra_info["marked_points"]  # what the teacher reads (for the tools' coordinates)
        # The question names the points but gives no coordinate: the student has no number to pass on.
        assert "A and B" in sample.question and not any(ch.isdigit() for ch in sample.question)
    assert "blinkdepth" in UNTRAINABLE


def test_shipped_configs_agree_with_the_teacher_turns() -> None:
    for name in ("dirl-qwen2.5-vl-3b.yaml", "dirl-smollm2.yaml"):
        assert turn_limit_problems(load_config(DIRLConfig, CONFIGS / name)) == [], name


def test_a_config_whose_families_cannot_finish_is_refused_before_any_stage(tmp_path: Path) -> None:
    config = {
        "data": {"families": ["reflocation", "robospatial", "blinkdepth"]},
        "rollout": {"max_turns": 4},
        "universal_teacher": {"rollout": {"max_turns": 8}},
    }
    problems = turn_limit_problems(DIRLConfig.model_validate(config))
    assert len(problems) == 2
    assert problems[0].startswith("blinkdepth: its teacher reads the marked points")
    assert problems[1] == (
        "robospatial: the teacher needs 7 turns, more than grpo.rollout.max_turns 4, rollout.max_turns 4"
    )
    path = tmp_path / "dirl.yaml"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["train", "dirl", "--config", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "robospatial: the teacher needs 7 turns" in result.output
    assert not (tmp_path / "run" / "data").exists()  # refused before the first stage
