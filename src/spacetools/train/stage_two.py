"""Which families stage 2 trains: those the SFT model already answers better than a constant guess.

GRPO learns from differences between a group's episodes; on a family where SFT is at chance its rewards
are noise (issue 31: cvb2drelation at 50 % fed stage 2 nothing but noise). The choice is made on the
validation set, never on the test set the tables report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spacetools.bench.summary import Summary


def families_beating_constant(summary: Summary, guesses: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per benchmark of `summary`: its headline interval, the constant guess's headline (`guesses`, the
    baseline's dicts by benchmark) and whether the interval lies above it; `chosen` lists the benchmarks
    that beat it."""
    rows: dict[str, Any] = {}
    for key, bench in summary.benchmarks.items():
        interval = bench.interval()
        guess = guesses.get(key)
        constant = float(guess["headline"]) if guess is not None else None
        rows[key] = {
            "headline": bench.metrics.get("headline", 0.0),
            "interval": interval,
            "constant_guess": constant,
            "beats": interval is not None and constant is not None and interval[0] > constant,
        }
    return {"benchmarks": rows, "chosen": sorted(key for key, row in rows.items() if row["beats"])}
