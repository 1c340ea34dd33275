"""`make gpu-check` on a machine without CUDA: one clear line and exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: `make gpu-check` runs for real")
def test_gpu_check_says_there_is_no_cuda_and_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "check")], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "gpu-check: no CUDA device on this machine (torch.cuda.is_available() is False)"
    )
    assert not (tmp_path / "check").exists()
