"""Real perception backends on tiny random models: load time, latency per call, memory, Toolshed overhead.

Run: `python benchmarks/real_perception.py --json` (one JSON object on stdout). Each backend is loaded
from a folder saved by the test builders (tests/tools/models/tiny_models.py), on the CPU unless
`--device cuda:0`. Per backend: `setup()` time, resident memory added by the load, the median latency
of a direct tool call, and the median of the same call through a Toolshed (in-process and in a worker
process), measured side by side (direct and Toolshed calls alternate). The tiny models make the model's own cost small, so the overhead is
what the Toolshed and the tool's pre- and post-processing add.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# One thread per process: the reference machine has 2 shared cores, and worker processes inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parents[1] / "tests")]

from spacetools.kit.definition import Tool, ToolContext, invoke_tool_method  # noqa: E402
from spacetools.toolshed import ToolDeployment, Toolshed  # noqa: E402

IMAGE_SHAPE = (120, 160, 3)


def _rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20


def _builders() -> dict[str, Any]:
    from tests.tools.models import tiny_models

    from tiny_qwen import build_tiny_qwen25_vl

    return {
        "depth_pro": tiny_models.build_depth_pro,
        "depth_anything": tiny_models.build_depth_anything,
        "sam": tiny_models.build_sam,
        "sam2": tiny_models.build_sam2,
        "qwen": build_tiny_qwen25_vl,
    }


def _cases(models: Path, device: str) -> list[tuple[str, str, str, dict[str, Any], dict[str, Any]]]:
    """(label, tool path, method, tool config, arguments)."""
    segment = {"x": 0.5, "y": 0.5, "image_index": 0}
    depth = {"image_index": 0}
    base = "spacetools.tools.models"
    return [
        ("depth_estimator/depth_pro", f"{base}.depth:DepthProTool", "depth_estimator.estimate_depth", {"model_path": str(models / "depth_pro")}, depth),
        ("depth_estimator/depth_anything", f"{base}.depth:DepthAnythingTool", "depth_estimator.estimate_depth", {"model_path": str(models / "depth_anything")}, depth),
        ("sam2/sam", f"{base}.segmentation:SamModelTool", "sam2.segment_from_point", {"model_path": str(models / "sam")}, segment),
        ("sam2/sam2", f"{base}.segmentation:Sam2ModelTool", "sam2.segment_from_point", {"model_path": str(models / "sam2")}, segment),
        ("vlm/transformers (Qwen2.5-VL, 8 new tokens)", f"{base}.pointing:VLMTransformersTool", "vlm.detect_one", {"model_path": str(models / "qwen"), "max_new_tokens": 8}, {"obj_name": "mug", "image_index": 0}),
    ]  # fmt: skip


def _load(tool_path: str, config: dict[str, Any]) -> tuple[Tool, float, float]:
    """A set-up tool instance, its `setup()` seconds and the resident memory the load added (MB)."""
    module, _, name = tool_path.partition(":")
    tool: Tool = getattr(__import__(module, fromlist=[name]), name)(**config)
    before = _rss_mb()
    started = time.perf_counter()
    tool.setup()
    return tool, time.perf_counter() - started, _rss_mb() - before


async def _side_by_side(
    tool: Tool, tool_path: str, method: str, config: dict[str, Any], arguments: dict[str, Any], image: np.ndarray, backend: str, repeats: int
) -> tuple[float, float]:  # fmt: skip
    """Median ms of a direct call and of the same call through a Toolshed, alternated call by call."""
    ctx = ToolContext.local([image], session_id="bench")
    async with Toolshed([ToolDeployment(tool=tool_path, backend=backend, config=config)]) as shed:
        session = shed.open_session([image])
        for _ in range(3):  # warm-up: first calls pay for kernel selection and caches
            invoke_tool_method(tool, method, arguments, ctx)
            await session.call(method, arguments)
        direct, through = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            invoke_tool_method(tool, method, arguments, ctx)
            direct.append(time.perf_counter() - started)
            started = time.perf_counter()
            await session.call(method, arguments)
            through.append(time.perf_counter() - started)
    return statistics.median(direct) * 1e3, statistics.median(through) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    image = np.random.default_rng(0).integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)
    results: dict[str, Any] = {
        "image": f"{IMAGE_SHAPE[1]}x{IMAGE_SHAPE[0]}",
        "device": args.device,
        "tools": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        models = Path(folder)
        for name, build in _builders().items():
            (models / name).mkdir()
            build(models / name)
        for label, tool_path, method, config, arguments in _cases(models, args.device):
            config = {**config, "device": args.device}
            tool, load_s, added_mb = _load(tool_path, config)
            entry = {"load_s": load_s, "rss_added_mb": added_mb}
            for backend in ("inprocess", "process"):
                direct, through = asyncio.run(
                    _side_by_side(tool, tool_path, method, config, arguments, image, backend, args.repeats)
                )
                entry[f"{backend}_direct_ms"] = direct
                entry[f"{backend}_toolshed_ms"] = through
                entry[f"{backend}_overhead_ms"] = through - direct
            results["tools"][label] = {key: round(value, 3) for key, value in entry.items()}
            if not args.json:
                print(label, results["tools"][label], file=sys.stderr)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
