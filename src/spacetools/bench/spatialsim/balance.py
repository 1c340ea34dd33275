"""How balanced a generated set is: answer counts per family, as numbers and as a rich table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from rich.table import Table

from spacetools.bench.dataset import Sample
from spacetools.rewards.formats import format_choice, format_yes_no

#: Answers that are a class (yes/no, an option letter); anything else is counted by question type.
_CLASS_ANSWERS = {format_yes_no(True), format_yes_no(False)} | {format_choice(k) for k in range(26)}


def answer_balance(samples: Sequence[Sample]) -> Counter[str]:
    """Counts of each yes/no or letter answer; open answers (points, masks, boxes) count by `qa_type`."""
    counts: Counter[str] = Counter()
    for sample in samples:
        truth = sample.ground_truth
        counts[truth if truth in _CLASS_ANSWERS else str(sample.extra_info.get("qa_type", "open"))] += 1
    return counts


def balance_table(by_family: Mapping[str, Sequence[Sample]], title: str = "SpatialSim") -> Table:
    """A table with one row per family: data source, number of questions, answer balance."""
    table = Table(title=title)
    table.add_column("family")
    table.add_column("n", justify="right")
    table.add_column("answer balance")
    for family, samples in by_family.items():
        counts = answer_balance(samples)
        table.add_row(family, str(len(samples)), ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return table
