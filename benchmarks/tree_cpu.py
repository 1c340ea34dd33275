"""Run a command; print its wall time and the CPU seconds of its whole process tree.

`python benchmarks/tree_cpu.py spacetools eval …` counts the server, the forkserver and every tool
worker: this process is the tree's child subreaper (Linux), so every descendant is reaped here and its
CPU time lands in this process's children's usage. On a shared machine CPU seconds compare two
versions far better than wall time.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main() -> None:
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    start = time.perf_counter()
    code = subprocess.call(sys.argv[1:])
    while True:  # the orphaned descendants (forkserver, workers) are ours to reap
        try:
            os.wait()
        except ChildProcessError:
            break
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"wall {time.perf_counter() - start:.1f} s, CPU {usage.ru_utime + usage.ru_stime:.1f} s "
        f"(user {usage.ru_utime:.1f}, system {usage.ru_stime:.1f}), load {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
    )
    sys.exit(code)


if __name__ == "__main__":
    main()
