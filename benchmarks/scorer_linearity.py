"""Time against input length for the turn parser and every scorer, on hostile shapes of model output.

Each target (``parse_turn``, and ``compute_score`` on one data source per scorer) reads outputs of
1 KB to 1 MB built from shapes that once made a parser quadratic: runaway ``<answer>`` tags, a grasp
label followed by spaces, an unclosed point with a huge number, mixed tags and many points. Reported
per target: the time per KB at each length for its slowest shape, and the growth exponent k of
time ∝ length^k (fitted over the lengths) of its worst shape (1 is linear, 2 quadratic). Ratios
from one run, side by side; nothing is asserted here.

    python benchmarks/scorer_linearity.py [--json] [--max-kb 1024]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

import numpy as np

from spacetools.agent.protocol import parse_turn
from spacetools.rewards import compute_score

KB = 1024
LENGTHS_KB = (1, 16, 256, 1024)
GRASP = (
    "Grasp center: [0.5, 0.5], Left finger base: [0.4, 0.5], Right finger base: [0.6, 0.5], "
    "Left finger tip: [0.4, 0.6], Right finger tip: [0.6, 0.6]"
)
CORNERS = "[(0, 0), (1, 0), (1, 1), (0, 1), (0, 0), (1, 0), (1, 1), (0, 1)]"
MASK = np.zeros((64, 64), dtype=bool)
MASK[16:48, 16:48] = True
# One data source per scorer: (ground truth, extra_info).
SOURCES: dict[str, tuple[object, dict]] = {
    "robospatial": ("Yes", {}),
    "spatialsim_robospatial": ("[(0.2, 0.2), (0.4, 0.2), (0.3, 0.4)]", {}),
    "reflocation": (MASK, {}),
    "spatialsim_reflocation": (MASK, {}),
    "blinkdepth": ("(A)", {"choices": ["A", "B"]}),
    "boppose": (CORNERS, {}),
    "bopgrasp": (GRASP, {}),
    "spatialsim_detect2d": ("[[0.1, 0.1, 0.4, 0.4]]", {}),
}


def _fill(unit: str, length: int, prefix: str = "", suffix: str = "") -> str:
    body = length - len(prefix) - len(suffix)
    return prefix + (unit * (body // len(unit) + 1))[:body] + suffix


SHAPES: dict[str, Callable[[int], str]] = {
    "answer_tags": lambda n: _fill("<answer>", n),
    "grasp_label_spaces": lambda n: _fill(" ", n, "<answer>Grasp center:", "</answer>"),
    "unclosed_number": lambda n: _fill("1", n, "<answer>("),
    "mixed_tags": lambda n: _fill("<think><answer><tool_call></think>", n),
    "many_points": lambda n: _fill("(0.5, 0.5), ", n, "<answer>[", "]</answer>"),
    "tool_call_big_int": lambda n: _fill(
        "9", n, '<tool_call>{"name": "echo.echo", "arguments": {"x": ', "}}</tool_call>"
    ),
}


def _seconds(function: Callable[[], object], repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def _targets() -> dict[str, Callable[[str], object]]:
    targets: dict[str, Callable[[str], object]] = {"parse_turn": parse_turn}
    for source, (truth, extra_info) in SOURCES.items():
        targets[f"score:{source}"] = lambda text, s=source, t=truth, e=extra_info: compute_score(
            s, text, t, e
        )
    return targets


def measure(lengths_kb: tuple[int, ...]) -> dict[str, dict]:
    """Per target: seconds per (shape, length) and the growth exponent per shape."""
    results: dict[str, dict] = {}
    for name, target in _targets().items():
        times = {
            shape: {
                kb: _seconds(lambda text=build(kb * KB), run=target: run(text), repeats=3 if kb < 256 else 1)
                for kb in lengths_kb
            }
            for shape, build in SHAPES.items()
        }
        # The slope of log time against log length, fitted over all lengths (robust to one noisy point).
        logs = np.log(lengths_kb)
        exponents = {
            shape: float(np.polyfit(logs, np.log([max(t[kb], 1e-9) for kb in lengths_kb]), 1)[0])
            for shape, t in times.items()
        }
        results[name] = {"seconds": times, "exponent": exponents}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    parser.add_argument("--max-kb", type=int, default=1024, help="longest input in KB (default 1024)")
    args = parser.parse_args()
    lengths = tuple(kb for kb in LENGTHS_KB if kb <= args.max_kb)
    results = measure(lengths)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    header = " ".join(f"{kb:>7}KB" for kb in lengths)
    print(f"{'target':<30} µs per KB, slowest shape: {header}   worst k (shape)")
    for name, figures in results.items():
        per_kb = [max(t[kb] for t in figures["seconds"].values()) / kb * 1e6 for kb in lengths]
        shape, exponent = max(figures["exponent"].items(), key=lambda item: item[1])
        cells = " ".join(f"{value:>9.1f}" for value in per_kb)
        print(f"{name:<30} {'':>26}{cells}   {exponent:.2f} ({shape})")


if __name__ == "__main__":
    main()
