"""The robot evaluation's report page (``templates/robot_report.html``): the run's policy, profile and
seed, per category the success rate, per episode the task's image with the target marked, the tool
chain with each call's pictures (those the tools returned, and a zoomed drawing of a grasp or box they
reported, as the evaluation report shows them) and the motion's frames (a strip of stills and an
animated GIF)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageDraw

from spacetools.agent.types import ToolCallRecord
from spacetools.bench.pages import render_page
from spacetools.bench.report.toolchain import declared_geometry, tool_geometry_picture

if TYPE_CHECKING:
    from spacetools.bench.robot.evaluate import EpisodeResult

REPORT_FILE = "report.html"
STRIP_FRAMES = 8
RESULT_CHARS = 240
TASK_SIZE = (320, 240)
TOOL_PICTURE_WIDTH = 240
TARGET_COLOR = (0, 200, 80)


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


def task_picture(result: EpisodeResult) -> Image.Image:
    """The task's image at report size with the target's box drawn (the truth, for the reader only)."""
    picture = Image.fromarray(result.task.image).resize(TASK_SIZE)
    box = result.task.target_box
    if box is not None:
        width, height = picture.size
        x0, y0, x1, y1 = box
        draw = ImageDraw.Draw(picture)
        draw.rectangle(
            (x0 * width - 2, y0 * height - 2, x1 * width + 2, y1 * height + 2), outline=TARGET_COLOR, width=2
        )
        draw.text((x0 * width, max(0.0, y0 * height - 12)), "target", fill=TARGET_COLOR)
    return picture


@dataclass(frozen=True)
class _Picture:
    file: str
    caption: str


@dataclass(frozen=True)
class _Call:
    name: str
    arguments: str
    result: str
    is_error: bool
    pictures: list[_Picture]


@dataclass(frozen=True)
class _Episode:
    """What an episode's section shows (``templates/robot_report.html``)."""

    result: EpisodeResult
    folder: str
    has_motion: bool
    calls: list[_Call]


def _call_pictures(result: EpisodeResult, number: int, call: ToolCallRecord, folder: Path) -> list[_Picture]:
    """Write call ``number``'s pictures into the episode's folder: the ones its tool returned, then a
    zoomed drawing of each grasp or box it reported on the task's image."""
    trajectory = result.trajectory
    pictures: list[_Picture] = []
    for i in call.image_indices:
        if 0 <= i - trajectory.task_image_count < len(trajectory.images):
            picture = Image.fromarray(trajectory.images[i - trajectory.task_image_count])
            picture.thumbnail((TOOL_PICTURE_WIDTH, TOOL_PICTURE_WIDTH))
            name = f"call-{number}-{len(pictures)}.png"
            picture.save(folder / name)
            pictures.append(_Picture(name, f"{call.name} returned this picture"))
    record = {"geometry": call.geometry, "value": call.value, "is_error": call.is_error}
    for kind, points in declared_geometry(record):
        drawn = tool_geometry_picture(result.task.image, kind, points)
        if drawn is not None:
            name = f"call-{number}-{len(pictures)}.png"
            drawn[0].save(folder / name)
            pictures.append(_Picture(name, drawn[1]))
    return pictures


def _calls(result: EpisodeResult, folder: Path) -> list[_Call]:
    return [
        _Call(
            call.name,
            call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments),
            call.result_text
            if len(call.result_text) <= RESULT_CHARS
            else call.result_text[:RESULT_CHARS] + "…",
            call.is_error,
            _call_pictures(result, number, call, folder),
        )
        for number, call in enumerate(result.trajectory.tool_calls)
    ]


def write_robot_report(
    results: list[EpisodeResult], out_dir: str | Path, settings: dict[str, Any] | None = None
) -> Path:
    """Write `report.html` and each episode's `task.png`, call pictures, `strip.png` and `motion.gif`
    under `out_dir`; `settings` (the run's policy, profile, seed, ...) head the page."""
    from spacetools.bench.robot.evaluate import summarize

    out = Path(out_dir)
    episodes = []
    for result in results:
        folder = out / "episodes" / result.task.id
        folder.mkdir(parents=True, exist_ok=True)
        task_picture(result).save(folder / "task.png")
        strip = frame_strip(result.frames)
        if strip is not None:
            strip.save(folder / "strip.png")
            write_animation(result.frames, folder / "motion.gif")
        # The motion is shown when written now, or by the run a resumed episode came from.
        has_motion = (folder / "strip.png").is_file()
        episodes.append(_Episode(result, f"episodes/{result.task.id}", has_motion, _calls(result, folder)))
    page = render_page(
        "robot_report.html", settings=settings or {}, summaries=summarize(results), episodes=episodes
    )
    path = out / REPORT_FILE
    path.write_text(page, encoding="utf-8", errors="replace")
    return path
