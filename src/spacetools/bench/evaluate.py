"""The evaluation harness: benchmark samples → :func:`~spacetools.agent.rollout.run_episodes` with live
tools and scoring → a run folder (see :mod:`spacetools.bench.runfolder`) with a summary and a report.

One :class:`EvalConfig` describes a run; ``run.json`` records it, and resuming into a folder made with
other settings is refused with the differing fields named, so one folder never mixes two runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from spacetools.agent.rollout import RolloutConfig, run_episodes
from spacetools.agent.types import Policy, Trajectory
from spacetools.bench.dataset import Sample, episode_input, load_samples
from spacetools.bench.progress import progress_bar
from spacetools.bench.report import CARDS_FOLDER, CardBuilder, write_report
from spacetools.bench.runfolder import REPORT_FILE, RUN_FILE, SAMPLES_FILE, SUMMARY_FILE, RunFolder, read_rows
from spacetools.bench.runlock import run_folder_lock
from spacetools.bench.runlog import run_log
from spacetools.bench.summary import Summary, summarize, summary_table
from spacetools.kit import imagecodec
from spacetools.kit.versions import versions
from spacetools.rewards.benchmarks import passed
from spacetools.toolshed import ToolProvider, ToolsConfig, connect

__all__ = [
    "REPORT_FILE",
    "RUN_FILE",
    "SAMPLES_FILE",
    "SUMMARY_FILE",
    "EvalConfig",
    "PolicyErrorsError",
    "RunMismatchError",
    "evaluate",
    "evaluate_async",
    "read_rows",
]

logger = logging.getLogger(__name__)

THUMBNAIL_WIDTH = 320

#: Fields that do not change what a run measures: a resumed run may differ in them.
RESUMABLE_FIELDS = frozenset(
    {
        "data",
        "out",
        "benches",
        "limit",
        "resume",
        "report",
        "system_prompt",
        "max_policy_errors",
        "rollout.concurrency",
    }
)
#: Episodes in a row ended by a policy error before a run stops (a model that cannot be reached).
MAX_POLICY_ERRORS = 3


class EvalConfig(BaseModel):
    """Everything that defines an evaluation run; ``run.json`` records it and the CLI maps onto it.

    ``policy`` and ``policy_options`` name the policy as :func:`~spacetools.agent.policies.make_policy`
    builds it (the harness fills ``policy`` with the policy's own name). ``tools`` says which tools the
    episodes call (see :func:`~spacetools.toolshed.connect`), ``rollout`` how the episodes run.
    ``system_prompt`` is a template file; its text lands in ``rollout.system_prompt``. The run stops when
    ``max_policy_errors`` episodes in a row end with a policy error (0: never).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    data: Path
    out: Path
    benches: list[str] | None = None
    limit: Annotated[int | None, Field(ge=1)] = None
    policy: str | None = None
    policy_options: dict[str, Any] = Field(default_factory=dict)
    tools: ToolsConfig = Field(default_factory=lambda: ToolsConfig())
    system_prompt: Path | None = None
    resume: bool = True
    report: bool = True
    max_policy_errors: Annotated[int, Field(ge=0)] = MAX_POLICY_ERRORS
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig())
    versions: dict[str, str | None] | None = None
    """What a run was made with (``kit.versions``), as its ``run.json`` records it; never compared."""

    def run_record(self) -> dict[str, Any]:
        """What ``run.json`` holds (the versions are added as the run starts)."""
        return self.model_dump(mode="json", exclude={"versions"})

    @property
    def folder(self) -> RunFolder:
        """The run folder, ``out``."""
        return RunFolder(self.out)


class RunMismatchError(ValueError):
    """The run folder holds a run made with other settings."""


class PolicyErrorsError(RuntimeError):
    """Episodes in a row ended with a policy error (the model cannot be reached, or fails every turn)."""


def _measured_fields(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The fields of a ``run.json`` that change what a run measures, as ``tools.profile``-style keys."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if name in RESUMABLE_FIELDS or name == "versions":  # a resume may run on an upgraded install
            continue
        if isinstance(value, dict) and name in ("tools", "rollout"):
            flat.update(_measured_fields(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def check_resume(out: Path, config: EvalConfig) -> None:
    """Refuse to resume into a folder whose ``run.json`` records other settings (naming each one)."""
    folder = RunFolder(out)
    try:
        previous = folder.recorded_run()
    except ValueError as error:
        raise RunMismatchError(
            f"{folder.run_file} is unreadable ({error}); use another --out or --no-resume"
        ) from None
    if previous is None:
        return
    old, new = _measured_fields(previous), _measured_fields(config.run_record())
    changed = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    if changed:
        described = "; ".join(f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in changed)
        raise RunMismatchError(
            f"{out} holds a run with other settings ({described}); use another --out or --no-resume"
        )


def _prepare_folder(config: EvalConfig) -> str | None:
    """Check a resumed run folder (or start it afresh) and write ``run.json``; the folder exists and this
    run holds its lock. Returns what a resume repaired in ``samples.jsonl`` (None: nothing)."""
    folder = config.folder
    repaired = None
    if config.resume:
        check_resume(folder.path, config)
        repaired = folder.repair()
    else:
        folder.forget_samples()
        shutil.rmtree(folder.path / CARDS_FOLDER, ignore_errors=True)
    # What the run was made with; not compared on a resume.
    folder.record_run({**config.run_record(), "versions": versions()})
    return repaired


def thumbnail_data_url(image: np.ndarray, width: int = THUMBNAIL_WIDTH) -> str:
    """A small JPEG data URL of an RGB image (tool pictures in the report)."""
    return imagecodec.thumbnail_data_url(image, width)


def sample_row(sample: Sample, trajectory: Trajectory, question: str) -> dict[str, Any]:
    """One ``samples.jsonl`` row. A scorer failure is scored 0 with the reason on the row."""
    score = trajectory.score
    if score is None:
        reason = trajectory.error if (trajectory.error or "").startswith("scorer failed") else "not scored"
        score = {"score": 0.0, "reason": reason}
        trajectory.score = score
    # Tool pictures are for the report only: small JPEG thumbnails keep samples.jsonl lean.
    tool_images = [thumbnail_data_url(image) for image in trajectory.images]
    trajectory.images = []
    return {
        "id": trajectory.task_id,
        "data_source": trajectory.data_source,
        "index": sample.extra_info.get("index"),
        "question": question,
        "score": score,
        # Pass or fail by the headline figure (a RefSpatial answer with acc 0 fails whatever its NNDC).
        "passed": passed(trajectory.data_source, score),
        "trajectory": trajectory.to_dict(),
        "tool_images": tool_images,
    }


def _log_episode(trajectory: Trajectory, score: dict[str, Any]) -> None:
    """One line per finished episode (debug), and its error where it has one (warning)."""
    logger.debug(
        "%s: score %.3f, %d turns, %d tool calls, %s",
        trajectory.task_id,
        float(score.get("score", 0.0)),
        trajectory.turns,
        len(trajectory.tool_calls),
        trajectory.finish_reason,
    )
    if trajectory.error:
        logger.warning("%s: %s", trajectory.task_id, trajectory.error)


def token_rate(policy: Policy) -> Callable[[], str] | None:
    """For a policy that counts the tokens it writes (``stats()["new_tokens"]`` and ``"tokens_in_flight"``,
    as the ``hf`` policy does):
    its tokens so far and their rate, which move while an episode runs (a local model's turn can take a
    minute); None for others."""
    stats = getattr(policy, "stats", None)
    if not callable(stats):
        return None

    def written() -> int:
        now = stats()
        return int(now.get("new_tokens", 0)) + int(now.get("tokens_in_flight", 0))

    started, first = time.monotonic(), written()

    def detail() -> str:
        tokens = written() - first
        elapsed = time.monotonic() - started
        return f"{tokens} tok, {tokens / elapsed if elapsed > 0 else 0.0:.1f} tok/s"

    return detail


async def _run_pending(
    policy: Policy,
    toolshed: ToolProvider,
    pending: dict[str, Sample],
    config: EvalConfig,
    console: Console | None,
    cards: CardBuilder | None,
) -> None:
    """Run the pending samples' episodes, appending one scored row per episode as it ends (and handing
    it to ``cards``, which builds its report card meanwhile)."""
    inputs = [episode_input(sample, key) for key, sample in pending.items()]
    questions = {item.task.id: item.task.question for item in inputs}
    detail = token_rate(policy)
    bar = progress_bar(console, "episodes", len(inputs), unit="ep", detail=detail) if console else None
    # Policy errors in a row are held back: a run stopped by them leaves their samples to the next run.
    held: list[Trajectory] = []
    with config.folder.writer() as writer, bar or contextlib.nullcontext() as advance:

        def write(trajectories: list[Trajectory]) -> None:
            for trajectory in trajectories:
                row = sample_row(pending[trajectory.task_id], trajectory, questions[trajectory.task_id])
                writer.append(row)
                if cards is not None:
                    cards.submit(row, pending[trajectory.task_id])
                _log_episode(trajectory, row["score"])
                if advance is not None:
                    advance(1)

        def on_result(trajectory: Trajectory) -> None:
            if trajectory.finish_reason == "policy_error" and config.max_policy_errors:
                held.append(trajectory)
                if len(held) >= config.max_policy_errors:
                    raise PolicyErrorsError(
                        f"{len(held)} episodes in a row ended with a policy error, so the run stopped "
                        f"(the last: {trajectory.error}); check the model's endpoint and rerun the same "
                        "command to resume"
                    )
                return
            write([*held, trajectory])
            held.clear()

        await run_episodes(policy, toolshed, inputs, config=config.rollout, on_result=on_result)
        write(held)  # fewer in a row than the limit at the end: failures of the run, recorded


async def _run_and_summarize(
    policy: Policy,
    config: EvalConfig,
    samples: dict[str, Sample],
    console: Console | None,
    cards: CardBuilder | None,
) -> tuple[Summary, list[dict[str, Any]]]:
    """Run the samples not done before; the summary (saved) over every row of the run, and the rows."""
    done = config.folder.done()
    pending = {key: sample for key, sample in samples.items() if key not in done}
    logger.info(
        "evaluating %s on %d samples from %s (%d done before), %s tools, seed %d, into %s",
        policy.name,
        len(samples),
        config.data,
        len(samples) - len(pending),
        config.tools.profile,
        config.tools.seed,
        config.out,
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    if pending:
        async with connect(config.tools) as toolshed:
            await _run_pending(policy, toolshed, pending, config, console, cards)
    run_wall_s = loop.time() - started

    rows = [row for row in config.folder.rows() if row.get("id") in samples]
    summary = summarize(
        rows, policy=policy.name, profile=config.tools.profile, data=str(config.data), run_wall_s=run_wall_s
    )
    summary.save(config.folder.summary_file)
    logger.info("%d episodes in %.1f s", len(pending), run_wall_s)
    return summary, rows


async def evaluate_async(
    policy: Policy,
    config: EvalConfig,
    *,
    console: Console | None = None,
) -> Summary:
    """Evaluate ``policy`` with live tools as ``config`` says; write the run folder; return the summary
    over every row of the run (resumed ones included). A console shows a progress bar, notes and the
    final table.
    """
    rollout = config.rollout.with_options(system_prompt=config.system_prompt)
    config = config.model_copy(update={"policy": policy.name, "rollout": rollout})
    samples = load_samples(config.data, config.benches, config.limit)
    with run_folder_lock(config.out):  # one writer per run folder, for the whole run
        repaired = _prepare_folder(config)
        # The report's cards are built as the episodes end, in worker processes started before the tools.
        builder = CardBuilder(config.out / CARDS_FOLDER) if config.report else None
        with run_log(config.out), builder or contextlib.nullcontext():
            if repaired:
                logger.warning(repaired)
            summary, rows = await _run_and_summarize(policy, config, samples, console, builder)
            if builder is not None:
                cards = builder.finish(rows, samples)
                write_report(config.folder.report_file, summary, rows, samples, cards=cards)
    if console is not None:
        console.print(summary_table(summary))
    return summary


def evaluate(policy: Policy, config: EvalConfig, *, console: Console | None = None) -> Summary:
    """Evaluate ``policy`` as ``config`` says (see :func:`evaluate_async`).

    This runs its own event loop, so before the loop ends it closes what the policy holds in it (its
    ``aclose``: HTTP connections, a batching task); the policy stays usable for a later run.
    """

    async def run_then_close() -> Summary:
        try:
            return await evaluate_async(policy, config, console=console)
        finally:
            if isinstance(policy, Policy):  # one with only `name` and `act` holds nothing to close
                await policy.aclose()

    return asyncio.run(run_then_close())
