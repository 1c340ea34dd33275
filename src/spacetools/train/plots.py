"""What a researcher looks at after a run: reward and loss curves as PNG (TensorBoard is written live)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_COLUMNS = 3  # panels per row of a stage's figure
CURVES = {"sft": ("loss",), "grpo": ("reward_mean", "valid_turn_rate", "policy_loss", "kl", "entropy")}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a `metrics.jsonl` (a torn last line is skipped)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def plot_stage(metrics: Path, out: Path, title: str) -> Path | None:
    """One PNG with a panel per curve of the stage's metrics; None when there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics)
    if not rows:
        return None
    names = [name for name in CURVES.get(rows[0].get("stage", ""), ("loss",)) if name in rows[0]]
    columns = min(len(names), MAX_COLUMNS)
    rows_of_panels = -(-len(names) // columns)
    figure, axes = plt.subplots(
        rows_of_panels, columns, figsize=(4 * columns, 3 * rows_of_panels), squeeze=False
    )
    for axis in axes.flat[len(names) :]:
        axis.set_visible(False)
    steps = [row["step"] for row in rows]
    for axis, name in zip(axes.flat, names, strict=False):
        axis.plot(steps, [row[name] for row in rows], marker="o", markersize=3)
        axis.set_title(name)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out
