"""`spacetools eval --policy hf`: a real (tiny, random) Qwen2.5-VL answers SpatialSim samples with live tools."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spacetools.agent.types import EpisodeState, Task
from spacetools.bench.dataset import read_samples
from tiny_qwen import build_tiny_qwen25_vl

from .eval_run import read_run, run_eval

pytest.importorskip("torch")
pytest.importorskip("transformers")

MAX_NEW_TOKENS = 24


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-qwen2.5-vl")
    build_tiny_qwen25_vl(directory)
    return directory


@pytest.mark.slow
def test_hf_model_runs_spatialsim_samples_end_to_end(
    tiny_model: Path, spatialsim_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    run_eval(
        [
            "--policy", "hf",
            "--option", f"model_path={tiny_model}",
            "--option", f"max_new_tokens={MAX_NEW_TOKENS}",
            "--data", str(spatialsim_data),
            "--out", str(out),
            "--profile", "exact",
            "--max-turns", "2",
            # One episode at a time: each generate sees one prompt, as the re-generation below does.
            "--concurrency", "1",
        ]
    )  # fmt: skip

    rows, summary = read_run(out)
    samples = {f"{s.data_source}/{s.extra_info['index']}": s for s in read_samples(spatialsim_data)}
    assert sorted(row["id"] for row in rows) == sorted(samples)
    assert summary["policy"] == f"hf:{tiny_model.name}" and summary["n"] == len(samples)
    for row in rows:
        trajectory = row["trajectory"]
        assert trajectory["error"] is None, trajectory["error"]
        assert trajectory["finish_reason"] not in ("policy_error", "toolshed_error", "rollout_error")
        assert 1 <= trajectory["turns"] <= 2
        assert 0.0 <= row["score"]["score"] <= 1.0 and "parse_ok" in row["score"]

        # The recorded first turn is what the model itself writes for that prompt (greedy decoding).
        messages = trajectory["messages"]
        first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        assert isinstance(messages[first]["content"], str)
        sample = samples[row["id"]]
        task = Task(
            id=row["id"], data_source=sample.data_source, question=row["question"], images=sample.images
        )
        state = EpisodeState(
            task=task, messages=messages[:first], images=sample.images, turn=0, tool_specs=[]
        )
        assert _regenerate(tiny_model, state) == messages[first]["content"]


def _regenerate(model_path: Path, state: EpisodeState) -> str:
    """One assistant turn from a fresh policy on the same model (built here: no CLI state is reused)."""
    from spacetools.agent.policies.hf import load_hf_policy

    policy = load_hf_policy(str(model_path), max_new_tokens=MAX_NEW_TOKENS)
    return asyncio.run(policy.act(state))
