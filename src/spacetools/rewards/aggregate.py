"""Benchmark-level metrics, as the paper reports them, from per-sample score dicts.

Figures are percentages (×100) except ``n`` and the grasp ``nce``. Each result starts with
``headline`` (the number the paper's tables show), then the benchmark's own figures, ``n`` and
``parse_rate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Rows = Sequence[Mapping[str, Any]]
REFSPATIAL_SPLITS: tuple[str, ...] = ("reflocation", "refplacement", "refunseen")


def _percent_mean(rows: Rows, key: str) -> float:
    """Mean of ``row[key]`` over (at least one) rows, ×100; ValueError naming the key when a row lacks it."""
    try:
        values = [float(row[key]) for row in rows]
    except KeyError as error:
        raise ValueError(f"every score row needs the key {key!r} to aggregate this benchmark") from error
    return 100.0 * float(np.mean(values))


def _robospatial(rows: Rows) -> dict[str, float]:
    """VQA (yes/no rows), vacant (point rows) and overall, the row-weighted mean of the two.

    A part with no rows is left out rather than written as NaN, which strict JSON cannot hold.
    """
    figures: dict[str, float] = {}
    for part, is_vacant in (("vqa", False), ("vacant", True)):
        part_rows = [row for row in rows if _flag(row, "vacant") is is_vacant]
        if part_rows:
            figures[part] = _percent_mean(part_rows, "acc")
    overall = _percent_mean(rows, "acc")
    return {**figures, "overall": overall, "headline": overall}


def _flag(row: Mapping[str, Any], key: str) -> bool:
    """A boolean column of a score row; ValueError when it is missing."""
    if key not in row:
        raise ValueError(f"every score row needs the key {key!r} to aggregate this benchmark")
    return bool(row[key])


def _refspatial(rows: Rows) -> dict[str, float]:
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


def _accuracy(rows: Rows) -> dict[str, float]:
    accuracy = _percent_mean(rows, "acc")
    return {"accuracy": accuracy, "headline": accuracy}


def _pointing(rows: Rows) -> dict[str, float]:
    accuracy = _percent_mean(rows, "acc")
    return {"accuracy": accuracy, "nndc": _percent_mean(rows, "nndc"), "headline": accuracy}


def _pose(rows: Rows) -> dict[str, float]:
    mean_iou = _percent_mean(rows, "iou")
    return {"mean_iou": mean_iou, "headline": mean_iou}


def _grasp(rows: Rows) -> dict[str, float]:
    """MACE ×100, SR = % of rows with MACE > 0.40, and the mean NCE (not a percentage)."""
    nce = _percent_mean(rows, "nce") / 100.0
    mace = _percent_mean(rows, "mace")
    return {"mace": mace, "sr": _percent_mean(rows, "sr"), "nce": nce, "headline": mace}


def _boxes(rows: Rows) -> dict[str, float]:
    miou = _percent_mean(rows, "iou")
    return {"miou": miou, "headline": miou}


_AGGREGATORS: dict[str, Callable[[Rows], dict[str, float]]] = {
    "robospatial": _robospatial,
    "refspatial": _refspatial,
    "reflocation": _accuracy,
    "refplacement": _accuracy,
    "refunseen": _accuracy,
    "blinkdepth": _accuracy,
    "cvb2drelation": _accuracy,
    "cvb3ddepth": _accuracy,
    "boppose": _pose,
    "bopgrasp": _grasp,
    "spatialsim_robospatial": _robospatial,
    "spatialsim_reflocation": _pointing,
    "spatialsim_refplacement": _pointing,
    "spatialsim_blinkdepth": _accuracy,
    "spatialsim_cvb2drelation": _accuracy,
    "spatialsim_cvb3ddepth": _accuracy,
    "spatialsim_boppose": _pose,
    "spatialsim_bopgrasp": _grasp,
    "spatialsim_detect2d": _boxes,
}
BENCHMARK_KEYS: tuple[str, ...] = tuple(_AGGREGATORS)


def aggregate(benchmark_key: str, rows: Rows) -> dict[str, float]:
    """The paper's metrics for one benchmark from its rows (the dicts ``compute_score`` returned).

    ``benchmark_key`` is a data source, or ``"refspatial"`` for the three RefSpatial splits together
    (then each row needs its ``data_source``). ValueError for an unknown key or no rows.
    """
    aggregator = _AGGREGATORS.get(benchmark_key)
    if aggregator is None:
        raise ValueError(f"unknown benchmark {benchmark_key!r}; known: {', '.join(BENCHMARK_KEYS)}")
    if not rows:
        raise ValueError(f"no rows to aggregate for benchmark {benchmark_key!r}")
    figures = aggregator(rows)
    parse_rate = 100.0 * float(np.mean([_flag(row, "parse_ok") for row in rows]))
    return {"headline": figures.pop("headline"), **figures, "n": len(rows), "parse_rate": parse_rate}
