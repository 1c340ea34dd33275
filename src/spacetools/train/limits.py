"""Which families a DIRL config can train: the teacher must finish them within the config's turn limits.

A perfect imitator of a teacher that needs 7 turns scores 0 when its episodes stop after 4, so a config
whose trained families need more turns than its limits is refused before any stage runs. The turn
counts are the scripted teacher's (the most it took per family, measured by
`tests/train/test_limits.py` on generated questions). A family whose teacher reads what the student is
never given cannot be imitated at all and is never trained.
"""

from __future__ import annotations

from spacetools.bench.spatialsim import FAMILIES
from spacetools.train.config import DIRLConfig

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
        "grpo.rollout.max_turns": config.stage_rollout(config.grpo).max_turns,
        "rollout.max_turns": config.rollout.max_turns,  # the evaluations'
        "universal_teacher.rollout.max_turns": config.stage_rollout(config.universal_teacher).max_turns,
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
