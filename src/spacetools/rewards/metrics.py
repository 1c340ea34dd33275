"""The benchmarks' metrics maths: per-sample score dicts in, the paper's figures out.

Figures are percentages (×100) except the grasp ``nce``. Each aggregator returns ``headline`` (the
number the paper's tables show) among its figures; ``spacetools.rewards.aggregate`` picks the
aggregator of a benchmark from the registry and adds ``n`` and ``parse_rate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Rows = Sequence[Mapping[str, Any]]
Aggregator = Callable[[Rows], dict[str, float]]
REFSPATIAL_SPLITS: tuple[str, ...] = ("reflocation", "refplacement", "refunseen")


def _percent_mean(rows: Rows, key: str) -> float:
    """Mean of ``row[key]`` over (at least one) rows, ×100; ValueError naming the key when a row lacks it."""
    try:
        values = [float(row[key]) for row in rows]
    except KeyError as error:
        raise ValueError(f"every score row needs the key {key!r} to aggregate this benchmark") from error
    return 100.0 * float(np.mean(values))


def robospatial_metrics(rows: Rows) -> dict[str, float]:
    """VQA (yes/no rows), vacant (point rows) and overall, the row-weighted mean of the two.

    A part with no rows is left out rather than written as NaN, which strict JSON cannot hold.
    """
    figures: dict[str, float] = {}
    for part, is_vacant in (("vqa", False), ("vacant", True)):
        part_rows = [row for row in rows if flag(row, "vacant") is is_vacant]
        if part_rows:
            figures[part] = _percent_mean(part_rows, "acc")
    overall = _percent_mean(rows, "acc")
    return {**figures, "overall": overall, "headline": overall}


def flag(row: Mapping[str, Any], key: str) -> bool:
    """A boolean column of a score row; ValueError when it is missing."""
    if key not in row:
        raise ValueError(f"every score row needs the key {key!r} to aggregate this benchmark")
    return bool(row[key])


def refspatial_metrics(rows: Rows) -> dict[str, float]:
    """Per-split accuracy, their unweighted mean (the RefSpatial figure) and the row-weighted mean."""
    figures: dict[str, float] = {}
    for split in REFSPATIAL_SPLITS:
        split_rows = [row for row in rows if str(row.get("data_source", "")) == split]
        if split_rows:
            figures[split] = _percent_mean(split_rows, "acc")
    if len(figures) == 0:
        raise ValueError(f"refspatial rows need a 'data_source' key with one of {REFSPATIAL_SPLITS}")
    figures["refspatial"] = float(np.mean(list(figures.values())))
    figures["row_weighted"] = _percent_mean(rows, "acc")
    figures["headline"] = figures["refspatial"]
    return figures


def accuracy_metrics(rows: Rows) -> dict[str, float]:
    """Accuracy: the mean ``acc``."""
    accuracy = _percent_mean(rows, "acc")
    return {"accuracy": accuracy, "headline": accuracy}


def pointing_metrics(rows: Rows) -> dict[str, float]:
    """Accuracy (the fraction of points inside) and the mean dense NNDC reward."""
    accuracy = _percent_mean(rows, "acc")
    return {"accuracy": accuracy, "nndc": _percent_mean(rows, "nndc"), "headline": accuracy}


def pose_metrics(rows: Rows) -> dict[str, float]:
    """The mean hull IoU."""
    mean_iou = _percent_mean(rows, "iou")
    return {"mean_iou": mean_iou, "headline": mean_iou}


def grasp_metrics(rows: Rows) -> dict[str, float]:
    """MACE ×100, SR = % of rows with MACE > 0.40, and the mean NCE (not a percentage)."""
    nce = _percent_mean(rows, "nce") / 100.0
    mace = _percent_mean(rows, "mace")
    return {"mace": mace, "sr": _percent_mean(rows, "sr"), "nce": nce, "headline": mace}


def box_metrics(rows: Rows) -> dict[str, float]:
    """MIoU: the mean of the per-sample mean best IoU."""
    miou = _percent_mean(rows, "iou")
    return {"miou": miou, "headline": miou}
