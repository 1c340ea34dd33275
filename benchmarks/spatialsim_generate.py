"""SpatialSim generation speed: questions per second, per family and overall, and the time for 1000.

Target: 1000 questions (all nine families) in under 5 minutes on 2 cores. By default the run is
smaller and the time for 1000 is extrapolated from the measured overall rate; `--n 112` generates
1008 questions for a direct measurement. The per-family rates (one process each) come from a separate,
smaller run of `--per-family-n` questions per family (0 skips it).

    python benchmarks/spatialsim_generate.py [--n N] [--per-family-n N] [--workers W] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spacetools.bench.spatialsim import FAMILIES, generate
from spacetools.bench.spatialsim.generator import default_workers, write_families

TARGET_S_PER_1000 = 300.0


def measure(n: int, seed: int, workers: int, per_family_n: int) -> dict[str, Any]:
    """Time all families together (`n` each) on `workers` processes, then each family alone
    (`per_family_n` questions) on one process."""
    start = time.perf_counter()
    by_family = generate(n, seed, workers=workers)
    generated_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        write_families(Path(folder), by_family)
    total_s = time.perf_counter() - start
    questions = n * len(FAMILIES)
    rate = questions / total_s
    per_family: dict[str, float] = {}
    for name in FAMILIES if per_family_n > 0 else ():
        family_start = time.perf_counter()
        generate(per_family_n, seed, [name], workers=1)
        per_family[name] = per_family_n / (time.perf_counter() - family_start)
    return {
        "questions": questions,
        "workers": workers,
        "generate_s": round(generated_s, 2),
        "generate_and_write_s": round(total_s, 2),
        "questions_per_s": round(rate, 2),
        "estimated_s_per_1000": round(1000 / rate, 1),
        "target_s_per_1000": TARGET_S_PER_1000,
        "meets_target": 1000 / rate < TARGET_S_PER_1000,
        "per_family_n": per_family_n,
        "single_process_questions_per_s": {name: round(value, 2) for name, value in per_family.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=12, help="questions per family (default 12)")
    parser.add_argument(
        "--per-family-n", type=int, default=6, help="questions per family for the per-family rates (0: skip)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.n < 1 or args.workers < 1 or args.per_family_n < 0:
        parser.error("--n and --workers must be positive, --per-family-n at least 0")
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "load_1min_before": load_before,
        **measure(args.n, args.seed, args.workers, args.per_family_n),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['questions']} questions on {result['workers']} process(es): "
        f"{result['generate_and_write_s']} s"
    )
    print(f"  {result['questions_per_s']} questions/s -> {result['estimated_s_per_1000']} s per 1000 ")
    print(f"  target < {TARGET_S_PER_1000:.0f} s: {'met' if result['meets_target'] else 'MISSED'}")
    if result["single_process_questions_per_s"]:
        print(f"  single process, per family ({args.per_family_n} questions each, questions/s):")
    for name, rate in result["single_process_questions_per_s"].items():
        print(f"    {name:<14} {rate}")


if __name__ == "__main__":
    main()
