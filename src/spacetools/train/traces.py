"""Teacher traces: the teaching data of DIRL, written as a multi-turn SFT data set with images.

A teacher (the scripted expert, an OpenAI-compatible model, or a local checkpoint) answers the questions
of a data set with live tools. An episode becomes a training example only when its answer scored at
least the family's threshold, it ended with an answer, and the teacher did not fall back to a guess
after a tool failure. `mix_traces` combines sources at a ratio (the paper: 1 IRL-teacher trace to 3
universal-teacher traces); it can empty the teacher's `<think>` text, for a model too small to reason in
words (the tiny config). Rows: `{"id", "data_source", "family", "teacher", "score", "messages",
"images"}`, images as data URLs; the messages address them by index as in a trajectory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from spacetools.agent.policies import make_policy
from spacetools.agent.protocol import without_thoughts
from spacetools.agent.rollout import run_episodes
from spacetools.agent.types import Policy, Trajectory
from spacetools.bench.dataset import episode_input, load_samples
from spacetools.bench.progress import progress_bar
from spacetools.kit import imagecodec
from spacetools.rewards.benchmarks import benchmark
from spacetools.toolshed import ToolProvider, connect
from spacetools.train.config import Thoughts, TracesConfig

EXACT_KINDS = ("yes_no", "choice")


def teacher_policy(config: TracesConfig) -> Policy:
    """The teacher: a policy by name, or the `hf` policy on a local model folder."""
    if Path(config.teacher).is_dir():
        return make_policy("hf", model_path=config.teacher, **config.teacher_options)
    return make_policy(config.teacher, **config.teacher_options)


def min_score(config: TracesConfig, data_source: str, ground_truth: Any) -> float:
    entry = benchmark(data_source)
    if entry.family in config.min_score_by_family:
        return config.min_score_by_family[entry.family]
    # Pointing into a mask is judged by accuracy (the share of points inside), an exact measure.
    exact = entry.mask_truth or entry.answer_kind(ground_truth) in EXACT_KINDS
    return config.min_score_exact if exact else config.min_score_graded


def kept_metric(data_source: str) -> str:
    """The score key a trace is kept on: pointing into a mask by accuracy (`acc`, points inside), not by
    the dense NNDC `score`, which a constant guess at the image centre passes on about 40% of questions."""
    return "acc" if benchmark(data_source).mask_truth else "score"


def rejection(trajectory: Trajectory, threshold: float, metric: str = "score") -> str | None:
    """Why an episode is not a training example (judged on `metric` of its score), or None when it is one."""
    if trajectory.error is not None:
        return "error"
    if trajectory.answer is None:
        return "no answer"
    if trajectory.fallback:
        return "fallback guess"
    if float((trajectory.score or {}).get(metric, 0.0)) < threshold:
        return "wrong"
    return None


def trace_row(trajectory: Trajectory, teacher: str) -> dict[str, Any]:
    """One SFT example: the conversation and the images its messages show."""
    shown = [
        part["index"]
        for message in trajectory.messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image"
    ]
    count = max(shown, default=-1) + 1
    return {
        "id": trajectory.task_id,
        "data_source": trajectory.data_source,
        "family": benchmark(trajectory.data_source).family,
        "teacher": teacher,
        "score": float((trajectory.score or {}).get("score", 0.0)),
        "messages": trajectory.messages,
        "images": [imagecodec.to_data_url(image) for image in trajectory.images[:count]],
    }


async def collect_traces_async(
    config: TracesConfig,
    policy: Policy | None = None,
    tools: ToolProvider | None = None,
    console: Console | None = None,
) -> dict[str, dict[str, int]]:
    """Run the teacher and write the kept episodes to `config.out`; returns counts per family and outcome.

    `tools`: a started Toolshed (or client) to call instead of the one the config describes. A console
    shows a progress bar.
    """
    samples = load_samples(config.data, config.benches, config.limit)
    teacher = policy or teacher_policy(config)
    inputs = [episode_input(sample, task_id) for task_id, sample in samples.items()]
    async with contextlib.AsyncExitStack() as stack:
        if policy is None:  # a teacher made here stops its model's tasks here
            stack.push_async_callback(teacher.aclose)
        provider = tools if tools is not None else await stack.enter_async_context(connect(config.tools))
        advance = (
            stack.enter_context(progress_bar(console, "episodes", len(inputs), unit="ep"))
            if console
            else None
        )
        trajectories = await run_episodes(
            teacher,
            provider,
            inputs,
            config=config.rollout,
            on_result=(lambda _: advance(1)) if advance else None,
        )
    counts: dict[str, Counter[str]] = {}
    config.out.parent.mkdir(parents=True, exist_ok=True)
    with config.out.open("w", encoding="utf-8") as handle:
        for trajectory, sample in zip(trajectories, samples.values(), strict=True):
            threshold = min_score(config, sample.data_source, sample.ground_truth)
            reason = rejection(trajectory, threshold, kept_metric(sample.data_source))
            counts.setdefault(benchmark(sample.data_source).family, Counter())[reason or "kept"] += 1
            if reason is None:
                handle.write(json.dumps(trace_row(trajectory, teacher.name)) + "\n")
    return {family: dict(counter) for family, counter in sorted(counts.items())}


def collect_traces(
    config: TracesConfig, policy: Policy | None = None, console: Console | None = None
) -> dict[str, dict[str, int]]:
    return asyncio.run(collect_traces_async(config, policy, console=console))


def mix_traces(
    sources: dict[Path, float], out: Path, *, seed: int = 0, thoughts: Thoughts = "full"
) -> dict[str, int]:
    """Mix SFT data sets at the given weights: as many rows as the weights allow without repeating any.

    With weights {irl: 1, universal: 3}, the mix holds k rows of the first and 3k of the second for the
    largest k both can give; rows are shuffled with `seed`. Returns the rows taken per source. A source
    with no rows (a teacher that answered nothing correctly) is left out rather than emptying the mix.
    `thoughts="empty"` writes the teacher's turns with empty `<think></think>` blocks.
    """
    rows = {path: path.read_text(encoding="utf-8").splitlines() for path in sources}
    given = [len(rows[path]) / weight for path, weight in sources.items() if weight > 0 and rows[path]]
    if not given:
        raise ValueError(f"no rows to mix: every source is empty ({', '.join(map(str, sources))})")
    scale = min(given)
    rng = np.random.default_rng(seed)
    taken: dict[str, int] = {}
    mixed: list[str] = []
    for path, weight in sources.items():
        count = min(len(rows[path]), int(scale * weight + 1e-9))  # the epsilon: 4/3 * 3 is 4
        chosen = rng.permutation(len(rows[path]))[:count]
        mixed.extend(
            rows[path][i] if thoughts == "full" else _row_without_thoughts(rows[path][i]) for i in chosen
        )
        taken[str(path)] = count
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(mixed[i] + "\n" for i in rng.permutation(len(mixed))), encoding="utf-8")
    return taken


def _row_without_thoughts(line: str) -> str:
    row = json.loads(line)
    for message in row.get("messages", []):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str):
            message["content"] = without_thoughts(message["content"])
    return json.dumps(row)
