"""Which families a DIRL config can train: the teacher must finish them within the config's turn limits.

A perfect imitator of a teacher that needs 7 turns scores 0 when its episodes stop after 4, so a config
whose trained families need more turns than its limits is refused before any stage runs. The turn
counts are the scripted teacher's (the most it took per family, measured by
`tests/train/test_limits.py` on generated questions). A family whose teacher reads what the student is
never given cannot be imitated at all and is never trained.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spacetools.agent.protocol import without_thoughts
from spacetools.bench.spatialsim import FAMILIES
from spacetools.train.config import DIRLConfig, GRPOConfig, TracesConfig

TEACHER_TURNS = {
    "reflocation": 2,
    "refplacement": 2,
    "cvb2drelation": 2,
    "blinkdepth": 3,
    "boppose": 4,
    "bopgrasp": 4,
    "robospatial": 7,
    "cvb3ddepth": 7,
    "detect2d": 8,
}
"""The scripted teacher's turns per family, at most (its answer turn included)."""

UNTRAINABLE = {
    "blinkdepth": "its teacher reads the marked points' coordinates, which the question does not give "
    '("Points A and B are circled in the image")',
}


def turn_limit_problems(config: DIRLConfig) -> list[str]:
    """What stops a perfect imitator of the teacher from finishing the config's families (empty: none)."""
    families = config.data.families or list(FAMILIES)
    limits = {
        "grpo.max_turns": int(config.grpo.get("max_turns", GRPOConfig.model_fields["max_turns"].default)),
        "eval_max_turns": config.eval_max_turns,
        "universal_teacher.max_turns": int(
            config.universal_teacher.get("max_turns", TracesConfig.model_fields["max_turns"].default)
        ),
    }
    problems = [f"{family}: {UNTRAINABLE[family]}" for family in families if family in UNTRAINABLE]
    for family in families:
        needed = TEACHER_TURNS[family]
        short = [f"{name} {limit}" for name, limit in limits.items() if limit < needed]
        if short and family not in UNTRAINABLE:
            problems.append(f"{family}: the teacher needs {needed} turns, more than {', '.join(short)}")
    return problems


def check_turn_limits(config: DIRLConfig) -> None:
    """Refuse a config whose trained families its limits cannot finish (unless `turn_check` is off)."""
    problems = turn_limit_problems(config) if config.turn_check else []
    if problems:
        raise ValueError(
            "families this config cannot train (set data.families, or raise the limits): "
            + "; ".join(problems)
        )


def longest_teacher_turn(traces: Path, tokenizer: Any, thoughts: str) -> dict[str, int]:
    """The most tokens the teacher wrote in one turn, per family, as the student is trained on it."""
    longest: dict[str, int] = {}
    for line in traces.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for message in row["messages"]:
            if message["role"] != "assistant" or not isinstance(message["content"], str):
                continue
            text = without_thoughts(message["content"]) if thoughts == "empty" else message["content"]
            tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            longest[row["family"]] = max(longest.get(row["family"], 0), tokens)
    return longest


def check_token_limits(config: DIRLConfig, traces: Path, tokenizer: Any) -> None:
    """Refuse a run whose per-turn token limits would cut the teacher's turns short: a perfect imitator
    whose tool call is truncated scores 0 (cvb2drelation's two calls in one turn take about 90 tokens)."""
    limits = {
        "eval_max_new_tokens": config.eval_max_new_tokens,
        "grpo.max_new_tokens": int(
            config.grpo.get("max_new_tokens", GRPOConfig.model_fields["max_new_tokens"].default)
        ),
    }
    problems = [
        f"{family}: a teacher turn takes {tokens} tokens, more than {name} {limit}"
        for family, tokens in sorted(longest_teacher_turn(traces, tokenizer, config.teacher_thoughts).items())
        for name, limit in limits.items()
        if tokens > limit
    ]
    if problems and config.turn_check:
        raise ValueError("the per-turn token limits cut the teacher's turns short: " + "; ".join(problems))
