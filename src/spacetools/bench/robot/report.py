"""The robot evaluation's report page (``templates/robot_report.html``): per category the success rate,
per episode the tool chain and the motion's frames (a strip of stills and an animated GIF), next to the
task's image."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from spacetools.bench.pages import render_page

if TYPE_CHECKING:
    from spacetools.bench.robot.evaluate import EpisodeResult

REPORT_FILE = "report.html"
STRIP_FRAMES = 8
RESULT_CHARS = 240


def frame_strip(frames: list[np.ndarray], count: int = STRIP_FRAMES) -> Image.Image | None:
    """`count` frames taken evenly from the motion, side by side."""
    if not frames:
        return None
    picks = [frames[i] for i in np.linspace(0, len(frames) - 1, min(count, len(frames))).round().astype(int)]
    return Image.fromarray(np.concatenate(picks, axis=1))


def write_animation(frames: list[np.ndarray], path: Path, frame_ms: int = 120) -> bool:
    """An animated GIF of the motion; False when there are no frames."""
    if not frames:
        return False
    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=frame_ms, loop=0)
    return True


@dataclass(frozen=True)
class _Call:
    name: str
    arguments: str
    result: str
    is_error: bool


@dataclass(frozen=True)
class _Episode:
    """What an episode's section shows (``templates/robot_report.html``)."""

    result: EpisodeResult
    folder: str
    has_motion: bool
    calls: list[_Call]


def _calls(result: EpisodeResult) -> list[_Call]:
    return [
        _Call(
            call.name,
            call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments),
            call.result_text
            if len(call.result_text) <= RESULT_CHARS
            else call.result_text[:RESULT_CHARS] + "…",
            call.is_error,
        )
        for call in result.trajectory.tool_calls
    ]


def write_robot_report(results: list[EpisodeResult], out_dir: str | Path) -> Path:
    """Write `report.html` and each episode's `task.png`, `strip.png` and `motion.gif` under `out_dir`."""
    from spacetools.bench.robot.evaluate import summarize

    out = Path(out_dir)
    episodes = []
    for result in results:
        folder = out / "episodes" / result.task.id
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(result.task.image).resize((320, 240)).save(folder / "task.png")
        strip = frame_strip(result.frames)
        if strip is not None:
            strip.save(folder / "strip.png")
            write_animation(result.frames, folder / "motion.gif")
        # The motion is shown when written now, or by the run a resumed episode came from.
        has_motion = (folder / "strip.png").is_file()
        episodes.append(_Episode(result, f"episodes/{result.task.id}", has_motion, _calls(result)))
    page = render_page("robot_report.html", summaries=summarize(results), episodes=episodes)
    path = out / REPORT_FILE
    path.write_text(page, encoding="utf-8", errors="replace")
    return path
