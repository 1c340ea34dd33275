"""How SpatialSim generation spreads over its worker processes: each worker's busy CPU seconds and when it
finished, the parent's CPU seconds while generating and while writing the parquet files, and the CPU
seconds of the whole process tree. On a shared machine these say more than wall time: with both workers
busy to the end, the wall time on idle cores is about (workers' CPU) / workers + the parent's write.

    python benchmarks/spatialsim_balance.py [--n 112] [--seed 41] [--workers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spacetools.bench.dataset import Sample
from spacetools.bench.spatialsim import generator

Job = tuple[int, str, int, int]


#: Set before the pool forks: the untimed job and the file each worker logs its jobs to.
_JOB: Callable[[Job], list[Sample]] = generator._generate_job
_LOG = Path(os.devnull)


def _timed_job(job: Job) -> list[Sample]:
    """The worker's job, appending `pid start end cpu` (wall clock, process CPU seconds) to `_LOG`.
    Module level: the pool pickles it by name."""
    start, cpu = time.time(), time.process_time()
    samples = _JOB(job)
    with _LOG.open("a") as file:
        file.write(f"{os.getpid()} {start} {time.time()} {time.process_time() - cpu}\n")
    return samples


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def measure(n: int, seed: int, workers: int) -> dict[str, Any]:
    """Generate `n` questions per family on `workers` processes and write them; where the time went."""
    with tempfile.TemporaryDirectory() as folder:
        global _LOG
        _LOG = log = Path(folder) / "jobs.log"
        generator._generate_job = _timed_job  # the pool forks after this: its workers run the timed job
        try:
            start, cpu = time.time(), _cpu(resource.RUSAGE_SELF)
            by_family = generator.generate(n, seed, workers=workers)
            generated, parent_generate = time.time(), _cpu(resource.RUSAGE_SELF) - cpu
        finally:
            generator._generate_job = _JOB
        cpu = _cpu(resource.RUSAGE_SELF)
        generator.write_families(Path(folder) / "out", by_family)
        written, parent_write = time.time(), _cpu(resource.RUSAGE_SELF) - cpu
        rows = [line.split() for line in log.read_text().splitlines()]
    per_worker: dict[str, dict[str, float]] = {}
    for pid, job_start, job_end, job_cpu in rows:
        worker = per_worker.setdefault(pid, {"jobs": 0, "cpu_s": 0.0, "busy_s": 0.0, "end_s": 0.0})
        worker["jobs"] += 1
        worker["cpu_s"] += float(job_cpu)
        worker["busy_s"] += float(job_end) - float(job_start)
        worker["end_s"] = max(worker["end_s"], float(job_end) - start)
    ends = [worker["end_s"] for worker in per_worker.values()]
    return {
        "questions": n * len(generator.FAMILIES),
        "workers": workers,
        "per_worker": [{key: round(value, 2) for key, value in w.items()} for w in per_worker.values()],
        "workers_cpu_s": round(sum(w["cpu_s"] for w in per_worker.values()), 1),
        "first_idle_to_last_end_s": round(max(ends) - min(ends), 1),
        "parent_generate_cpu_s": round(parent_generate, 1),
        "parent_write_cpu_s": round(parent_write, 1),
        "tree_cpu_s": round(_cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN), 1),
        "generate_wall_s": round(generated - start, 1),
        "write_wall_s": round(written - generated, 1),
        "load_1min": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=112, help="questions per family (default 112)")
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.n < 1 or args.workers < 2:
        parser.error("--n must be positive and --workers at least 2")
    result = measure(args.n, args.seed, args.workers)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
