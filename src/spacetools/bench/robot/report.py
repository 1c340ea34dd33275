"""The robot evaluation's report page: per category the success rate, per episode the tool chain and
the motion's frames (a strip of stills and an animated GIF), next to the task's image."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

if TYPE_CHECKING:
    from spacetools.bench.robot.evaluate import EpisodeResult

REPORT_FILE = "report.html"
STRIP_FRAMES = 8
RESULT_CHARS = 240
_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table.summary td, table.summary th { padding: 0.2em 0.8em; border-bottom: 1px solid #ccc; text-align: right; }
.episode { border: 1px solid #ccc; border-radius: 6px; padding: 0.8em; margin: 1em 0; }
.ok { color: #17813a; font-weight: bold; } .fail { color: #b3261e; font-weight: bold; }
.chain li { font-family: monospace; font-size: 0.85em; margin: 0.3em 0; }
.chain .error { color: #b3261e; }
img { border: 1px solid #ddd; margin-right: 0.5em; vertical-align: top; }
img.strip { max-width: 100%; }
"""


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


def _verdict(ok: bool | None) -> str:
    if ok is None:
        return "–"
    return '<span class="ok">yes</span>' if ok else '<span class="fail">no</span>'


def _chain(result: EpisodeResult) -> str:
    items = []
    for call in result.trajectory.tool_calls:
        arguments = html.escape(
            json.dumps(call.arguments) if not isinstance(call.arguments, str) else call.arguments
        )
        text = (
            call.result_text
            if len(call.result_text) <= RESULT_CHARS
            else call.result_text[:RESULT_CHARS] + "…"
        )
        css = ' class="error"' if call.is_error else ""
        items.append(f"<li{css}><b>{html.escape(call.name)}</b>({arguments}) → {html.escape(text)}</li>")
    answer = html.escape(result.trajectory.answer or f"(no answer: {result.trajectory.finish_reason})")
    return f'<ol class="chain">{"".join(items)}</ol><p>Answer: {answer}</p>'


def write_robot_report(results: list[EpisodeResult], out_dir: str | Path) -> Path:
    """Write `report.html` and each episode's `task.png`, `strip.png` and `motion.gif` under `out_dir`."""
    from spacetools.bench.robot.evaluate import summarize

    out = Path(out_dir)
    rows = "".join(
        f"<tr><td style='text-align:left'>{s.category}</td><td>{s.episodes}</td><td>{s.points}/{s.possible}</td>"
        f"<td>{s.success_rate:.2f}</td><td>{'–' if s.time_to_first_motion_s is None else f'{s.time_to_first_motion_s:.1f}'}</td>"
        f"<td>{s.seconds_per_episode:.1f}</td></tr>"
        for s in summarize(results)
    )
    sections = []
    for result in results:
        folder = out / "episodes" / result.task.id
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(result.task.image).resize((320, 240)).save(folder / "task.png")
        pictures = f'<img src="episodes/{result.task.id}/task.png" alt="task image">'
        strip = frame_strip(result.frames)
        if strip is not None:
            strip.save(folder / "strip.png")
            write_animation(result.frames, folder / "motion.gif")
        if (folder / "strip.png").is_file():  # written now, or by the run a resumed episode came from
            pictures += f'<img src="episodes/{result.task.id}/motion.gif" alt="motion">'
            pictures += (
                f'<br><img class="strip" src="episodes/{result.task.id}/strip.png" alt="motion frames">'
            )
        timing = (
            f"first motion {result.time_to_first_motion_s:.1f} s, "
            if result.time_to_first_motion_s is not None
            else ""
        ) + f"episode {result.wall_s:.1f} s"
        sections.append(
            f'<div class="episode"><h3>{html.escape(result.task.id)}: {html.escape(result.task.question)}</h3>'
            f"<p>picked {_verdict(result.outcome.picked)} · placed {_verdict(result.outcome.placed)} · "
            f"{html.escape(result.outcome.reason)} · {timing}</p>{pictures}{_chain(result)}</div>"
        )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Robot evaluation</title><style>{_STYLE}</style>"
        f"</head><body><h1>Robot evaluation</h1><table class='summary'><tr><th style='text-align:left'>category"
        f"</th><th>episodes</th><th>points</th><th>success</th><th>first motion (s)</th><th>s / episode</th></tr>"
        f"{rows}</table>{''.join(sections)}</body></html>"
    )
    path = out / REPORT_FILE
    path.write_text(page)
    return path
