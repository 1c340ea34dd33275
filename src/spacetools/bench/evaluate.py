"""The evaluation harness: run a policy on benchmark samples with live tools, score, summarize, report.

Output folder layout:

- ``run.json``: how the run was made (policy, profile, toolset, seed, turn limit, data); resuming into
  a folder made with other settings is refused, so one folder never mixes two runs.
- ``samples.jsonl``: one line per finished sample (``id``, ``data_source``, ``index``, ``question``,
  ``score``, ``trajectory``), appended and flushed as each episode ends, so a killed run loses at most
  the episodes in flight and a re-run skips every id already there.
- ``summary.json``: :class:`spacetools.bench.summary.Summary` over all rows.
- ``report.html``: :mod:`spacetools.bench.report`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from spacetools.agent.protocol import DEFAULT_MAX_TOOL_RESPONSE_CHARS, read_prompt_template
from spacetools.agent.rollout import run_episode
from spacetools.agent.types import Policy, Task, Trajectory
from spacetools.bench.dataset import Sample, read_samples
from spacetools.bench.report import write_report
from spacetools.bench.summary import Summary, summarize, summary_table
from spacetools.rewards import compute_score
from spacetools.tools.realism import get_profile
from spacetools.toolshed import ToolDeployment, Toolshed
from spacetools.toolshed.client import RemoteToolshed

SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
RUN_FILE = "run.json"
THUMBNAIL_WIDTH = 320

# extra_info keys that carry the answer: a policy must never see them.
HIDDEN_EXTRA_INFO_KEYS = frozenset({"answer", "ground_truth"})


def task_id(sample: Sample, position: int) -> str:
    """A stable id: the data source and the row's ``extra_info.index``, or else ``position``, the row's
    place among its benchmark's rows (what the original evaluation calls ``sample_id``)."""
    return f"{sample.data_source}/{sample.extra_info.get('index', position)}"


def _question(sample: Sample) -> str:
    """The user's question as the model reads it, without ``<image>`` tags."""
    users = [m for m in sample.prompt if m.get("role") == "user" and isinstance(m.get("content"), str)]
    text = users[-1]["content"] if users else sample.question
    return text.replace("<image>", "").strip()


def task_from_sample(sample: Sample, id: str) -> Task:
    """The policy's view of a sample: question, images, scenes and extra_info without the answer."""
    scene = sample.extra_info.get("scene")
    return Task(
        id=id,
        data_source=sample.data_source,
        question=_question(sample),
        images=list(sample.images),
        scenes=[scene] + [None] * (len(sample.images) - 1),
        extra_info={k: v for k, v in sample.extra_info.items() if k not in HIDDEN_EXTRA_INFO_KEYS},
    )


def load_samples(
    data: str | Path, benches: Sequence[str] | None = None, limit: int | None = None
) -> dict[str, Sample]:
    """Samples by task id, in file order; ``limit`` keeps the first ``limit`` of each benchmark."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    selected: dict[str, Sample] = {}
    rows_seen: dict[str, int] = {}
    for sample in read_samples(data, keys=benches):
        # Positions count within each benchmark, so an unindexed row's id does not depend on other files.
        position = rows_seen.get(sample.data_source, 0)
        rows_seen[sample.data_source] = position + 1
        if limit is not None and position >= limit:
            continue
        key = task_id(sample, position)
        if key in selected:
            raise ValueError(f"two samples share the id {key!r} (duplicate extra_info.index in {data})")
        selected[key] = sample
    if not selected:
        raise ValueError(
            f"no samples found in {data}" + (f" for benchmarks {list(benches)}" if benches else "")
        )
    return selected


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``samples.jsonl``; a torn last line (a run killed mid-write) is ignored."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number} is not valid JSON: {error}") from error
    return rows


def score_sample(sample: Sample, trajectory: Trajectory) -> dict[str, Any]:
    """The reward module's score of a trajectory against the sample's ground truth."""
    return compute_score(sample.data_source, trajectory.solution_text, sample.ground_truth, sample.extra_info)


def thumbnail_data_url(image: np.ndarray, width: int = THUMBNAIL_WIDTH) -> str:
    """A small JPEG data URL of an RGB image (tool pictures in the report)."""
    picture = Image.fromarray(image)
    picture.thumbnail((width, width))
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _check_run_settings(out_dir: Path, settings: dict[str, Any], resume: bool) -> None:
    """Refuse to mix two different runs in one folder; start the folder afresh when not resuming."""
    run_file, samples_file = out_dir / RUN_FILE, out_dir / SAMPLES_FILE
    if resume and run_file.is_file():
        previous = json.loads(run_file.read_text())
        changed = {
            k: (previous.get(k), v) for k, v in settings.items() if k != "data" and previous.get(k) != v
        }
        if changed:
            described = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
            raise ValueError(
                f"{out_dir} holds a run with other settings ({described}); use another --out or --no-resume"
            )
    elif not resume and samples_file.exists():
        samples_file.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(settings, indent=2) + "\n")


async def _run_tasks(
    policy: Policy,
    toolshed: Toolshed,
    pending: list[tuple[Task, Sample]],
    samples_file: Path,
    *,
    concurrency: int,
    progress: Progress | None,
    **episode_options: Any,
) -> None:
    """Run the pending episodes concurrently, appending one scored row per episode as it ends."""
    semaphore = asyncio.Semaphore(concurrency)
    bar = progress.add_task("episodes", total=len(pending)) if progress else None
    with samples_file.open("a") as handle:

        async def one(task: Task, sample: Sample) -> None:
            async with semaphore:
                started = time.perf_counter()
                try:
                    trajectory = await run_episode(policy, toolshed, task, **episode_options)
                except Exception as error:  # the row must exist even if the rollout itself breaks
                    trajectory = Trajectory(
                        task_id=task.id,
                        data_source=task.data_source,
                        messages=[],
                        tool_calls=[],
                        answer=None,
                        turns=0,
                        score=None,
                        parse_errors=0,
                        stats={},
                        wall_s=time.perf_counter() - started,
                        finish_reason="policy_error",
                        error=f"{type(error).__name__}: {error}",
                    )
                try:
                    score = score_sample(sample, trajectory)
                except Exception as error:  # a scorer bug is reported on the row, not fatal to the run
                    score = {"score": 0.0, "reason": f"scorer failed: {type(error).__name__}: {error}"}
                trajectory.score = score
                # Tool pictures are for the report only: small JPEG thumbnails keep samples.jsonl lean.
                tool_images = [thumbnail_data_url(image) for image in trajectory.images]
                trajectory.images = []
                row = {
                    "id": task.id,
                    "data_source": task.data_source,
                    "index": sample.extra_info.get("index"),
                    "question": task.question,
                    "score": score,
                    "trajectory": trajectory.to_dict(),
                    "tool_images": tool_images,
                }
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                if progress is not None and bar is not None:
                    progress.advance(bar)

        await asyncio.gather(*(one(task, sample) for task, sample in pending))


async def evaluate_async(
    policy: Policy,
    data: str | Path,
    *,
    out_dir: str | Path,
    benches: Sequence[str] | None = None,
    profile: str = "realistic",
    concurrency: int = 8,
    limit: int | None = None,
    resume: bool = True,
    toolset: str | Sequence[ToolDeployment] = "v1",
    seed: int = 0,
    max_turns: int = 8,
    max_tool_response_chars: int = DEFAULT_MAX_TOOL_RESPONSE_CHARS,
    system_prompt: Path | None = None,
    toolshed_url: str | None = None,
    console: Console | None = None,
    report: bool = True,
) -> Summary:
    """Evaluate ``policy`` on the samples in ``data`` with live tools; write the run folder.

    ``benches`` selects data sources (parquet stems); ``limit`` caps samples per benchmark; with
    ``resume`` the ids already in ``samples.jsonl`` are skipped. ``system_prompt`` is a prompt template
    file (``{tools}`` marks the tools block) for a model trained with its own prompt. With
    ``toolshed_url`` the tools run in a Toolshed server (``spacetools serve``) instead of in this
    process; ``toolset``, ``profile`` and ``seed`` are then the server's. A console shows a progress
    bar and the final table. Returns the summary over every row of the run (resumed ones included).
    """
    get_profile(profile)  # a ValueError listing the choices
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    out = Path(out_dir)
    samples = load_samples(data, benches, limit)
    settings = {
        "policy": policy.name,
        "profile": profile,
        "toolset": toolset if isinstance(toolset, str) else [repr(d) for d in toolset],
        "seed": seed,
        "max_turns": max_turns,
        "max_tool_response_chars": max_tool_response_chars,
        "system_prompt": str(system_prompt) if system_prompt else None,
        "toolshed_url": toolshed_url,
        "data": str(data),
    }
    prompt = read_prompt_template(system_prompt) if system_prompt else None
    _check_run_settings(out, settings, resume)
    samples_file = out / SAMPLES_FILE
    done = {row["id"] for row in read_rows(samples_file)}
    pending = [(task_from_sample(sample, key), sample) for key, sample in samples.items() if key not in done]

    started = time.perf_counter()
    if pending:
        progress = (
            Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            )
            if console is not None
            else None
        )
        tools = (
            RemoteToolshed(toolshed_url) if toolshed_url else Toolshed(toolset, profile=profile, seed=seed)
        )
        async with tools as toolshed:
            with progress if progress is not None else contextlib.nullcontext():
                await _run_tasks(
                    policy,
                    toolshed,
                    pending,
                    samples_file,
                    concurrency=concurrency,
                    progress=progress,
                    max_turns=max_turns,
                    max_tool_response_chars=max_tool_response_chars,
                    system_prompt=prompt,
                )
    run_wall_s = time.perf_counter() - started

    rows = [row for row in read_rows(samples_file) if row["id"] in samples]
    summary = summarize(rows, policy=policy.name, profile=profile, data=str(data), run_wall_s=run_wall_s)
    summary.save(out / SUMMARY_FILE)
    if report:
        write_report(out / REPORT_FILE, summary, rows, samples)
    if console is not None:
        console.print(summary_table(summary))
    return summary


def evaluate(policy: Policy, data: str | Path, **options: Any) -> Summary:
    """Evaluate ``policy`` on ``data`` with live tools; the options are those of :func:`evaluate_async`.

    This runs its own event loop, so before the loop ends it closes what the policy holds in it (its
    ``aclose``: HTTP connections, a batching task); the policy stays usable for a later run.
    """

    async def run_then_close() -> Summary:
        try:
            return await evaluate_async(policy, data, **options)
        finally:
            close = getattr(policy, "aclose", None)
            if close is not None:
                await close()

    return asyncio.run(run_then_close())
