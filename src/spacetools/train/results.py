"""The DIRL results table: skill on held-out questions, beside what a constant answer scores.

Per held-out set and benchmark: each evaluated model's headline with its 95% bootstrap interval, the
constant-guess baseline (:mod:`spacetools.bench.baseline`) with its interval, and the paired gain of
stage-2 GRPO over the SFT model on the same questions (paired bootstrap over sample ids). The
valid-turn rate is shown for diagnosis only: a model can reach 1.0 and answer at chance.
`results.json` holds the figures, `results.md` the table as the README quotes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spacetools.bench import bootstrap
from spacetools.bench.compare import run_rows, scores_by_benchmark
from spacetools.bench.summary import Summary
from spacetools.rewards import aggregate

RESULTS_FILE = "results.json"
TABLE_FILE = "results.md"


def valid_turn_rate(summary: Summary) -> float:
    """The share of the model's turns in an evaluation that parsed as tool calls or an answer."""
    turns = sum(bench.turns_mean * bench.n for bench in summary.benchmarks.values())
    invalid = sum(bench.invalid_turns for bench in summary.benchmarks.values())
    return 1.0 - invalid / turns if turns else 0.0


def mean_headline(summary: Summary) -> float:
    """The mean of the benchmarks' headline scores (the paper's ablation averages its benchmarks)."""
    scores = [bench.metrics.get("headline", 0.0) for bench in summary.benchmarks.values()]
    return sum(scores) / len(scores) if scores else 0.0


def paired_headline_gain(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, float]]:
    """Per benchmark, `after` − `before` in headline over the sample ids both scored, with its paired 95%
    bootstrap interval (the same resample of questions for both models)."""
    first, second = scores_by_benchmark(before), scores_by_benchmark(after)
    gains = {}
    for key in sorted(first.keys() & second.keys()):
        ids = [sample_id for sample_id in first[key] if sample_id in second[key]]
        if not ids:
            continue
        left = [first[key][sample_id] for sample_id in ids]
        right = [second[key][sample_id] for sample_id in ids]
        gains[key] = _paired_gain(key, left, right)
    return gains


def pooled_gain(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], keys: Sequence[str]
) -> dict[str, float] | None:
    """`after` − `before` in accuracy ×100 pooled over the questions of the benchmarks `keys` both scored
    (each question counts once, whatever its family), with its paired 95% bootstrap interval; None when no
    question pairs."""
    first, second = scores_by_benchmark(before), scores_by_benchmark(after)
    pairs = [
        (first[key][sample_id], second[key][sample_id])
        for key in keys
        if key in first and key in second
        for sample_id in first[key]
        if sample_id in second[key]
    ]
    if not pairs:
        return None
    change = np.array([100.0 * (float(b.get("acc", 0.0)) - float(a.get("acc", 0.0))) for a, b in pairs])

    def difference(indices: Sequence[int] | np.ndarray) -> dict[str, float]:
        return {"gain": float(change[np.asarray(indices)].mean())}

    low, high = bootstrap.statistic_intervals(len(pairs), difference)["gain"]
    return {"gain": difference(range(len(pairs)))["gain"], "low": low, "high": high, "n": len(pairs)}


def _paired_gain(key: str, left: list[Any], right: list[Any]) -> dict[str, float]:
    """`right` − `left` in headline, `left[i]` and `right[i]` scoring the same question."""

    def difference(indices: Sequence[int] | np.ndarray) -> dict[str, float]:
        after = aggregate(key, [right[i] for i in indices])["headline"]
        return {"gain": after - aggregate(key, [left[i] for i in indices])["headline"]}

    low, high = bootstrap.statistic_intervals(len(left), difference)["gain"]
    return {"gain": difference(range(len(left)))["gain"], "low": low, "high": high, "n": len(left)}


def _cell(headline: float, interval: Sequence[float] | None) -> str:
    return f"{headline:.1f} [{interval[0]:.1f}, {interval[1]:.1f}]" if interval else f"{headline:.1f}"


def _gain_cell(gain: Mapping[str, float] | None) -> str:
    return f"{gain['gain']:+.1f} [{gain['low']:+.1f}, {gain['high']:+.1f}]" if gain else ""


def results_table(results: Mapping[str, Any]) -> str:
    """The Markdown table of `results` (as `write_results` builds it): one block per held-out set."""
    lines = []
    for held_out, block in results["held_out"].items():
        columns = list(block["evaluations"])
        controls = list(block.get("gains", {}))
        gain_columns = ["GRPO gain over SFT (paired)", *(f"gain, {name} (paired)" for name in controls)]
        lines += [
            f"Held-out set `{held_out}` (seed {block['seed']}), headline ×100 with 95% bootstrap intervals:",
            "",
            "| benchmark | n | constant guess | " + " | ".join(columns + gain_columns) + " |",
            "|---|---|---|" + "---|" * (len(columns) + len(gain_columns)),
        ]
        for key, guess in block["constant_guess"].items():
            cells = []
            for column in columns:
                figures = block["evaluations"][column]["benchmarks"].get(key)
                cells.append(_cell(figures["headline"], figures["interval"]) if figures else "")
            gains = [block["grpo_gain"].get(key), *(block["gains"][name].get(key) for name in controls)]
            answer = guess["answer"]
            lines.append(
                f"| {key} | {guess['n']} | {_cell(guess['headline'], [guess['low'], guess['high']])} `{answer}` | "
                + " | ".join(cells + [_gain_cell(gain) for gain in gains])
                + " |"
            )
        lines.append(
            "| valid turn rate | | | "
            + " | ".join(f"{block['evaluations'][c]['valid_turn_rate']:.2f}" for c in columns)
            + " |" * (len(gain_columns) + 1)
        )
        pooled = block.get("pooled_gains", {})
        if pooled:
            keys = ", ".join(block["pooled_keys"])
            lines += [
                "",
                f"Paired gain over SFT in accuracy ×100, pooled over the trained families ({keys}):",
                "",
            ]
            lines += [
                f"- {name}: {_gain_cell(gain)} (n {gain['n'] if gain else 0})"
                for name, gain in pooled.items()
            ]
        lines.append("")
    return "\n".join(lines)


def write_results(
    out: Path,
    held_out: Mapping[str, Mapping[str, Any]],
    training_reward_gain: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """`results.json` and `results.md` of a run.

    `held_out` maps each held-out set's name to its `seed`, `constant_guess` (benchmark → ConstantGuess
    dict), `evaluations` (column name → evaluation folder), the `sft`/`dirl` folders to pair and, optionally,
    `pairs`: the controls' (before, after) folders by name (the placebo, other seeds, sampled decoding).
    """
    blocks = {}
    for name, spec in held_out.items():
        evaluations = {}
        for column, folder in spec["evaluations"].items():
            summary = Summary.load(Path(folder) / "summary.json")
            evaluations[column] = {
                "folder": Path(folder).name,
                "mean_headline": mean_headline(summary),
                "valid_turn_rate": valid_turn_rate(summary),
                "benchmarks": {
                    key: {
                        "headline": bench.metrics.get("headline", 0.0),
                        "interval": bench.interval(),
                        "n": bench.n,
                    }
                    for key, bench in summary.benchmarks.items()
                },
            }
        before, after = (run_rows(Path(spec[stage])) for stage in ("sft", "dirl"))
        gain = paired_headline_gain(before, after) if before is not None and after is not None else {}
        pooled_keys = spec.get("pooled", [])
        pooled = {
            control: pooled_gain(run_rows(Path(first)) or [], run_rows(Path(second)) or [], pooled_keys)
            for control, (first, second) in {
                "full DIRL": (spec["sft"], spec["dirl"]),
                **spec.get("pairs", {}),
            }.items()
        }
        controls = {
            control: paired_headline_gain(run_rows(Path(first)) or [], run_rows(Path(second)) or [])
            for control, (first, second) in spec.get("pairs", {}).items()
        }
        blocks[name] = {
            "seed": spec["seed"],
            "constant_guess": spec["constant_guess"],
            "evaluations": evaluations,
            "grpo_gain": gain,
            **({"gains": controls} if controls else {}),
            **({"pooled_keys": list(pooled_keys), "pooled_gains": pooled} if pooled_keys else {}),
        }
    results = {"held_out": blocks, "training_reward_gain": training_reward_gain}
    (out / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / TABLE_FILE).write_text(results_table(results), encoding="utf-8")
    return results
