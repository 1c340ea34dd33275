"""The evaluation harness end to end: SpatialSim parquet → scripted policy with live tools → run folder."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from spacetools.agent.policies.scripted import ScriptedPolicy
from spacetools.agent.rollout import RolloutConfig
from spacetools.agent.types import EpisodeState
from spacetools.bench.dataset import episode_input, load_samples
from spacetools.bench.evaluate import EvalConfig, RunMismatchError, check_resume, evaluate, read_rows
from spacetools.bench.spatialsim import generator
from spacetools.bench.summary import Summary
from spacetools.cli.main import app
from spacetools.toolshed import ToolsConfig

ONE_BENCH = "spatialsim_cvb2drelation"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two questions of every SpatialSim family."""
    folder = tmp_path_factory.mktemp("spatialsim")
    generator.export(folder, n=2, seed=11)
    return folder


class CountingPolicy(ScriptedPolicy):
    """The scripted policy, counting the episodes it starts."""

    def __init__(self) -> None:
        super().__init__()
        self.episodes = 0

    async def act(self, state: EpisodeState) -> str:
        self.episodes += state.turn == 0
        return await super().act(state)


def test_tasks_carry_neither_answer_nor_scene_and_the_tools_get_the_scene(data: Path) -> None:
    samples = load_samples(data)
    for key, sample in samples.items():
        item = episode_input(sample, key)
        assert not {"answer", "ground_truth", "scene"} & set(item.task.extra_info)
        visible = json.dumps(item.task.extra_info) + item.task.question
        assert sample.extra_info["scene"] not in visible
        if len(sample.ground_truth) > 12:  # points, masks, corners: never copied anywhere the policy looks
            assert sample.ground_truth not in visible
        assert item.attachments[0] == {"scene": sample.extra_info["scene"]}
        assert "<image>" not in item.task.question


def _strings_reachable(root: object) -> list[str]:
    """Every string a policy can reach from ``root`` by attributes, items and elements (arrays skipped)."""
    found: list[str] = []
    stack, seen = [root], set()
    while stack:
        value = stack.pop()
        if id(value) in seen or isinstance(value, (np.ndarray, int, float, type(None))):
            continue
        seen.add(id(value))
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            stack.extend([*value.keys(), *value.values()])
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend(value)
        elif hasattr(value, "__dict__"):
            stack.extend(vars(value).values())
    return found


class SnoopingPolicy(ScriptedPolicy):
    """The scripted expert, also collecting every string it could reach on every turn."""

    def __init__(self) -> None:
        super().__init__()
        self.reachable: list[str] = []

    async def act(self, state: EpisodeState) -> str:
        self.reachable.extend(_strings_reachable(state))
        return await super().act(state)


@pytest.mark.slow
def test_a_policy_cannot_reach_the_scene_while_the_tools_use_it(data: Path, tmp_path: Path) -> None:
    policy = SnoopingPolicy()
    benches = ["spatialsim_cvb3ddepth", "spatialsim_boppose"]
    summary = evaluate(
        policy,
        EvalConfig(
            data=data, out=tmp_path, benches=benches, tools=ToolsConfig(profile="exact"), report=False
        ),
    )
    scenes = [sample.extra_info["scene"] for sample in load_samples(data, benches).values()]
    assert policy.reachable and not [s for s in policy.reachable for scene in scenes if scene in s]
    rows = read_rows(tmp_path / "samples.jsonl")
    # The tools rebuilt every scene: the expert's measuring calls succeeded and it answered.
    assert all(not call["is_error"] for row in rows for call in row["trajectory"]["tool_calls"])
    assert summary.n == 4 and all(row["trajectory"]["finish_reason"] == "answer" for row in rows)


def test_limit_and_bad_arguments(data: Path, tmp_path: Path) -> None:
    assert len(load_samples(data, limit=1)) == 9
    with pytest.raises(ValueError, match="limit must be at least 1"):
        load_samples(data, limit=0)
    with pytest.raises(FileNotFoundError, match="no parquet for keys"):
        load_samples(data, ["spatialsim_nothing"])
    with pytest.raises(ValueError, match="unknown profile"):
        EvalConfig(data=data, out=tmp_path, tools=ToolsConfig(profile="perfect"))


@pytest.mark.slow
def test_cli_run_writes_summary_samples_and_report(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["eval", "--policy", "scripted", "--data", str(data), "--out", str(out), "--profile", "exact"]
    )
    assert result.exit_code == 0, result.output
    assert "report.html" in result.output
    rows = read_rows(out / "samples.jsonl")
    assert sorted(row["id"] for row in rows) == sorted(load_samples(data))
    summary = Summary.load(out)
    assert summary.n == 18 and len(summary.benchmarks) == 9
    for bench in summary.benchmarks.values():
        assert bench.n == 2 and bench.policy_errors == 0
        assert bench.tool_calls_mean >= 1 and bench.metrics["parse_rate"] == 100.0
    # The paper's pose chain, in order, on every pose sample.
    for row in rows:
        if row["data_source"] == "spatialsim_boppose":
            names = [call["name"] for call in row["trajectory"]["tool_calls"]]
            assert names[-2:] == ["sam2.segment_from_point", "bounding_box.compute_bbox"]
    page = (out / "report.html").read_text()
    assert page.count("data:image/webp;base64,") >= 18
    pictures = [p.name for p in (out / "report_files").iterdir() if "-tool-" not in p.name]
    assert len(pictures) == 18  # each sample's picture at full size (and the tools' beside them)
    for key in summary.benchmarks:
        assert f"id='{key}'" in page


@pytest.mark.slow
def test_rerun_resumes_and_compare_prints_both_runs(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = CountingPolicy()
    evaluate(
        first,
        EvalConfig(data=data, out=out, benches=[ONE_BENCH], tools=ToolsConfig(profile="exact"), limit=1),
    )
    assert first.episodes == 1
    kept = (out / "samples.jsonl").read_text()

    second = CountingPolicy()
    summary = evaluate(
        second, EvalConfig(data=data, out=out, benches=[ONE_BENCH], tools=ToolsConfig(profile="exact"))
    )
    assert second.episodes == 1  # only the sample the first run did not do
    assert (out / "samples.jsonl").read_text().startswith(kept)
    assert summary.benchmarks[ONE_BENCH].n == 2

    with pytest.raises(ValueError, match="other settings"):
        evaluate(
            ScriptedPolicy(),
            EvalConfig(data=data, out=out, benches=[ONE_BENCH], tools=ToolsConfig(profile="realistic")),
        )

    other = tmp_path / "harsh"
    evaluate(
        ScriptedPolicy(),
        EvalConfig(data=data, out=other, benches=[ONE_BENCH], tools=ToolsConfig(profile="harsh")),
    )
    result = CliRunner().invoke(app, ["eval", "compare", str(out), str(other / "summary.json")])
    assert result.exit_code == 0, result.output
    assert "cvb2drelation" in result.output and "accuracy" in result.output and "delta" in result.output


class WorkerKillingPolicy(ScriptedPolicy):
    """The scripted policy, SIGKILLing one live tool worker process before every third turn."""

    def __init__(self) -> None:
        super().__init__()
        self.turns = 0
        self.kills = 0

    async def act(self, state: EpisodeState) -> str:
        self.turns += 1
        workers = [
            p
            for p in multiprocessing.active_children()
            if p.name.startswith("toolshed-") and p.pid is not None and p.is_alive()
        ]
        if self.turns % 3 == 0 and workers:
            os.kill(workers[self.turns % len(workers)].pid, signal.SIGKILL)  # type: ignore[arg-type]
            self.kills += 1
        return await super().act(state)


@pytest.mark.slow
def test_tool_workers_crashing_mid_run_lose_no_sample(data: Path, tmp_path: Path) -> None:
    policy = WorkerKillingPolicy()
    benches = ["spatialsim_boppose", "spatialsim_robospatial", "spatialsim_cvb3ddepth"]
    config = EvalConfig(
        data=data,
        out=tmp_path,
        benches=benches,
        tools=ToolsConfig(profile="exact"),
        rollout=RolloutConfig(concurrency=6),
    )
    summary = evaluate(policy, config)
    assert policy.kills >= 3
    rows = read_rows(tmp_path / "samples.jsonl")
    assert sorted(row["id"] for row in rows) == sorted(load_samples(data, benches))
    assert summary.n == 6
    assert all(row["trajectory"]["error"] is None for row in rows)


@pytest.mark.slow
def test_system_prompt_file_reaches_every_episode(data: Path, tmp_path: Path) -> None:
    template = tmp_path / "prompt.txt"
    template.write_text("You are SpaceTools, trained with this exact prompt.\n{tools}\n")
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            *("eval", "--policy", "scripted", "--data", str(data), "--out", str(out), "--profile", "exact"),
            *("--bench", ONE_BENCH, "--system-prompt", str(template), "--max-tool-response-chars", "300"),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = read_rows(out / "samples.jsonl")
    assert rows
    for row in rows:
        system = row["trajectory"]["messages"][0]
        assert system["role"] == "system"
        assert system["content"].startswith("You are SpaceTools, trained with this exact prompt.")
        assert '"name": "roborefer.detect_one"' in system["content"]
        tool_texts = [m["content"] for m in row["trajectory"]["messages"] if m["role"] == "tool"]
        assert tool_texts and all(
            len(text) <= 300 + len("<tool_response>\n\n</tool_response>") for text in tool_texts
        )


def test_unreachable_toolshed_server_is_a_clear_error(data: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            *("eval", "--policy", "scripted", "--data", str(data), "--out", str(tmp_path / "run")),
            *("--bench", ONE_BENCH, "--toolshed-url", "http://127.0.0.1:9"),
        ],
    )
    assert result.exit_code == 1
    assert "127.0.0.1:9" in " ".join(result.output.split())


def test_run_json_records_the_config_and_resume_names_each_differing_field(tmp_path: Path) -> None:
    config = EvalConfig(data=tmp_path / "data", out=tmp_path, tools=ToolsConfig(profile="exact"))
    config = config.model_copy(update={"rollout": config.rollout.with_options(max_turns=5)})
    assert (config.rollout.max_turns, config.rollout.concurrency) == (5, 8)
    assert (config.tools.profile, config.tools.toolset) == ("exact", "v1")
    (tmp_path / "run.json").write_text(json.dumps(config.run_record()))
    check_resume(tmp_path, config.model_copy(update={"limit": 3, "data": Path("/moved")}))  # may differ
    changed = config.model_copy(
        update={
            "tools": config.tools.model_copy(update={"seed": 4}),
            "rollout": config.rollout.with_options(max_turns=6, concurrency=2),
        }
    )
    with pytest.raises(RunMismatchError, match=r"rollout\.max_turns: 5 -> 6; tools\.seed: 0 -> 4\)"):
        check_resume(tmp_path, changed)
    # A run.json of another shape (profile and seed at the top) differs in every field it lacks.
    flat = {k: v for k, v in config.run_record().items() if k != "tools"} | {"profile": "exact", "seed": 0}
    (tmp_path / "run.json").write_text(json.dumps(flat))
    with pytest.raises(RunMismatchError) as mismatch:
        check_resume(tmp_path, config)
    assert "(profile: 'exact' -> None; seed: 0 -> None; tools.profile: None -> 'exact'" in str(mismatch.value)
    with pytest.raises(ValueError, match="unknown profile"):
        EvalConfig(data=tmp_path, out=tmp_path, tools={"profile": "perfect"})
    with pytest.raises(ValueError, match="unknown toolset"):
        EvalConfig(data=tmp_path, out=tmp_path, tools={"toolset": "v9"})


class SurrogatePolicy:
    """Calls a real tool with a lone surrogate in its argument (legal JSON), then answers."""

    name = "surrogate"

    def __init__(self) -> None:
        self.episodes = 0

    async def act(self, state: EpisodeState) -> str:
        if state.turn == 0:
            self.episodes += 1
            return '<tool_call>{"name": "roborefer.detect_one", "arguments": {"prompt": "mug \\ud800"}}</tool_call>'
        return "<answer>(A)</answer>"


@pytest.mark.slow
def test_resume_repairs_a_torn_last_line_and_any_text_survives(
    data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "run"
    config = EvalConfig(data=data, out=out, benches=[ONE_BENCH], tools=ToolsConfig(profile="exact"))
    evaluate(SurrogatePolicy(), config)
    samples_file = out / "samples.jsonl"
    rows = read_rows(samples_file)
    assert len(rows) == 2 and rows[0]["trajectory"]["tool_calls"][0]["arguments"] == {"prompt": "mug \ud800"}
    whole = samples_file.read_bytes()
    first_line_end = whole.index(b"\n") + 1
    samples_file.write_bytes(whole[: first_line_end + 40])  # killed 40 bytes into the second row

    resumed = SurrogatePolicy()
    console = Console(record=True, width=200)
    summary = evaluate(resumed, config, console=console)
    assert resumed.episodes == 1  # the torn sample ran again, the whole one did not
    # Said once, as a warning: on stderr under the command line, and in the run's log.
    assert "dropped a torn last line (40 bytes)" in caplog.text
    assert "dropped a torn last line (40 bytes)" in (out / "run.log").read_text()
    assert [row["id"] for row in read_rows(samples_file)] == [row["id"] for row in rows]
    assert summary.n == 2 and (out / "report.html").stat().st_size > 0
