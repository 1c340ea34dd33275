"""The 1,008-question benchmark as a user runs it: generate it, then evaluate the scripted expert on it.

Run: `python benchmarks/expert_eval.py [--n 112] [--seed 41] [--json]`. Both steps run the CLI in a
process of their own, `spacetools data generate --n N --seed S` (nine families) and `spacetools eval
--policy scripted --profile exact` on what it wrote (episodes, tools, pictures and the report), and
each is timed from start to exit. Targets (issue 23, 2 cores): generation of the 1,008 questions in
at most 60 s; the evaluation in at most 150 s (90 s as the stretch). The per-family headline scores
are reported beside the times, so a faster run that answers worse shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GENERATE_TARGET_S = 60.0
EVAL_TARGET_S = 150.0
EVAL_STRETCH_S = 90.0


def timed(command: list[str]) -> float:
    """Run `command` (the CLI of this interpreter's environment); its wall time, or exit with its error."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return time.perf_counter() - started


def measure(n: int, seed: int) -> dict[str, Any]:
    cli = [str(Path(sys.executable).parent / "spacetools")]  # the console script, as a user runs it
    with tempfile.TemporaryDirectory() as folder:
        data, out = Path(folder) / "data", Path(folder) / "eval"
        generate_s = timed([*cli, "data", "generate", "--n", str(n), "--seed", str(seed), "--out", str(data)])
        eval_s = timed(
            [
                *cli,
                "eval",
                "--policy",
                "scripted",
                "--profile",
                "exact",
                "--data",
                str(data),
                "--out",
                str(out),
            ]
        )
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    benchmarks = summary["benchmarks"]
    questions = sum(int(bench["n"]) for bench in benchmarks.values())
    return {
        "n": n,
        "seed": seed,
        "questions": questions,
        "generate_s": round(generate_s, 1),
        "generate_target_s": GENERATE_TARGET_S,
        "eval_s": round(eval_s, 1),
        "eval_target_s": EVAL_TARGET_S,
        "eval_stretch_s": EVAL_STRETCH_S,
        "headline": {key: round(float(bench["metrics"]["headline"]), 4) for key, bench in benchmarks.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=112, help="questions per family (112: 1,008 in all)")
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("--n must be positive")
    report = {"load_1min_before": os.getloadavg()[0], "cpus": os.cpu_count(), **measure(args.n, args.seed)}
    if args.json:
        print(json.dumps(report))
        return
    print(
        f"{report['questions']} questions: generated in {report['generate_s']} s, evaluated in {report['eval_s']} s"
    )
    for key, value in report["headline"].items():
        print(f"  {key:<28} {value}")


if __name__ == "__main__":
    main()
