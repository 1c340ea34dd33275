"""``report.html``: one self-contained page per evaluation run.

The page has the summary table, the tool usage per benchmark and, per sample, the image annotated
with the predicted (red) and true (green) geometry (points, mask outline, box corners with edges,
grasp lines, 2D boxes) plus the points the pointing tools reported (blue), the question, the answer,
the score and the tool chain (each call, its arguments, the result text, the error flag). Images are
embedded as base64 PNG, so the file can be mailed or archived as it is.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from spacetools.bench.dataset import Sample
from spacetools.bench.summary import Summary, format_metrics
from spacetools.rewards.extraction import extract_answer
from spacetools.rewards.masks import load_mask
from spacetools.rewards.parsing import parse_boxes, parse_grasp, parse_points, parse_yes_no

TRUTH = (20, 190, 80)
PREDICTED = (235, 40, 40)
TOOL_POINT = (40, 120, 255)
IMAGE_WIDTH = 400
RESULT_CHARS = 600

# Edges of a BOP-ordered box: bottom face, top face, verticals.
BOX_EDGES = [(i, (i + 1) % 4) for i in range(4)] + [(4 + i, 4 + (i + 1) % 4) for i in range(4)]
BOX_EDGES += [(i, i + 4) for i in range(4)]
# Gripper drawn as the palm line between the finger bases and the two fingers.
GRASP_LINES = [(1, 2), (1, 3), (2, 4)]
POINTING_TOOLS = ("roborefer.detect_one", "roborefer.detect_all", "vlm.detect_one", "vlm.detect_all")


def answer_kind(data_source: str, ground_truth: str, extra_info: Mapping[str, Any]) -> str:
    """How to draw a sample: yesno, choice, mask, corners, grasp, boxes, points or text."""
    family = data_source.removeprefix("spatialsim_")
    if parse_yes_no(ground_truth) is not None and len(ground_truth) <= 5:
        return "yesno"
    if extra_info.get("choices"):
        return "choice"
    if ground_truth.startswith("data:image") or family in ("reflocation", "refplacement", "refunseen"):
        return "mask"
    if family.endswith("grasp"):
        return "grasp"
    if family.endswith("pose"):
        return "corners"
    if family == "detect2d":
        return "boxes"
    return "points" if parse_points(ground_truth) else "text"


def _pixels(points: Sequence[Sequence[float]], size: tuple[int, int]) -> list[tuple[float, float]]:
    width, height = size
    return [(float(x) * width, float(y) * height) for x, y in points]


def _dot(
    draw: ImageDraw.ImageDraw, point: tuple[float, float], color: tuple[int, int, int], r: int = 4
) -> None:
    x, y = point
    draw.ellipse([x - r, y - r, x + r, y + r], fill=color, outline=(255, 255, 255))


def _cross(
    draw: ImageDraw.ImageDraw, point: tuple[float, float], color: tuple[int, int, int], r: int = 5
) -> None:
    x, y = point
    draw.line([x - r, y, x + r, y], fill=color, width=2)
    draw.line([x, y - r, x, y + r], fill=color, width=2)


def _draw_mask(canvas: Image.Image, mask: np.ndarray) -> Image.Image:
    """A translucent green fill and a solid outline of ``mask``, resized to the canvas."""
    small = np.asarray(Image.fromarray(mask.astype(np.uint8) * 255).resize(canvas.size, Image.NEAREST)) > 0
    interior = small.copy()
    interior[1:-1, 1:-1] = (
        small[1:-1, 1:-1] & small[:-2, 1:-1] & small[2:, 1:-1] & small[1:-1, :-2] & small[1:-1, 2:]
    )
    pixels = np.asarray(canvas).astype(np.float32)
    pixels[small] = 0.65 * pixels[small] + 0.35 * np.array(TRUTH)
    pixels[small & ~interior] = TRUTH
    return Image.fromarray(pixels.astype(np.uint8))


def _draw_geometry(
    draw: ImageDraw.ImageDraw, kind: str, text: str, color: tuple[int, int, int], size: tuple[int, int]
) -> None:
    """Draw what ``text`` says in the format of ``kind`` (nothing when it does not parse)."""
    if kind == "corners":
        corners = _pixels(parse_points(text), size)
        if len(corners) == 8:
            for a, b in BOX_EDGES:
                draw.line([corners[a], corners[b]], fill=color, width=2)
        for corner in corners:
            _dot(draw, corner, color, r=3)
    elif kind == "grasp":
        grasp = parse_grasp(text)
        if grasp is not None:
            points = _pixels(grasp.tolist(), size)
            for a, b in GRASP_LINES:
                draw.line([points[a], points[b]], fill=color, width=3)
            _dot(draw, points[0], color)
    elif kind == "boxes":
        for x1, y1, x2, y2 in parse_boxes(text):
            draw.rectangle([x1 * size[0], y1 * size[1], x2 * size[0], y2 * size[1]], outline=color, width=2)
    elif kind in ("points", "mask"):
        for point in _pixels(parse_points(text), size):
            _dot(draw, point, color)


def annotate(
    image: np.ndarray,
    kind: str,
    answer: str,
    ground_truth: str,
    tool_points: Sequence[Sequence[float]] = (),
    width: int = IMAGE_WIDTH,
) -> Image.Image:
    """The sample image, downscaled to ``width``, with truth (green), prediction (red), tool points (blue)."""
    canvas = Image.fromarray(image)
    canvas = canvas.resize((width, max(1, round(canvas.height * width / canvas.width))), Image.BILINEAR)
    if kind == "mask":
        # An unreadable mask is left out of the picture; the text cell still shows the row.
        with contextlib.suppress(ValueError, OSError):
            canvas = _draw_mask(canvas, load_mask(ground_truth))
    draw = ImageDraw.Draw(canvas)
    if kind != "mask":
        _draw_geometry(draw, kind, ground_truth, TRUTH, canvas.size)
    for point in _pixels(tool_points, canvas.size):
        _cross(draw, point, TOOL_POINT)
    _draw_geometry(draw, kind, answer, PREDICTED, canvas.size)
    return canvas


def png_data_url(image: Image.Image) -> str:
    """A base64 PNG data URL (palette-quantized: the page stays small)."""
    buffer = io.BytesIO()
    image.quantize(colors=256).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _tool_points(trajectory: Mapping[str, Any]) -> list[tuple[float, float]]:
    return [
        point
        for call in trajectory["tool_calls"]
        if call["name"] in POINTING_TOOLS and not call["is_error"]
        for point in parse_points(call["result_text"])
    ]


def _answer_text(trajectory: Mapping[str, Any]) -> str:
    solution = "\n".join(
        m["content"]
        for m in trajectory["messages"]
        if m.get("role") == "assistant" and isinstance(m.get("content"), str)
    )
    return extract_answer(solution).text


def _short(text: str, limit: int) -> str:
    return (
        text
        if len(text) <= limit
        else text[: limit // 2] + f" … [{len(text) - limit} chars] … " + text[-limit // 2 :]
    )


def _tool_chain_html(trajectory: Mapping[str, Any]) -> str:
    if not trajectory["tool_calls"]:
        return "<p class='muted'>no tool calls</p>"
    rows = []
    for call in trajectory["tool_calls"]:
        status = "<span class='err'>error</span>" if call["is_error"] else "ok"
        rows.append(
            "<tr>"
            f"<td>{call['turn']}</td><td><code>{html.escape(call['name'])}</code></td>"
            f"<td><code>{html.escape(json.dumps(call['arguments']))}</code></td>"
            f"<td><pre>{html.escape(_short(call['result_text'], RESULT_CHARS))}</pre></td>"
            f"<td>{status}</td><td>{1000 * float(call['latency_s']):.0f} ms</td>"
            "</tr>"
        )
    return (
        "<table class='chain'><tr><th>turn</th><th>tool</th><th>arguments</th><th>result</th>"
        "<th></th><th>latency</th></tr>" + "".join(rows) + "</table>"
    )


def _sample_html(row: Mapping[str, Any], sample: Sample | None) -> str:
    trajectory = row["trajectory"]
    score = row["score"]
    answer = _answer_text(trajectory)
    value = float(score.get("score", 0.0))
    badge = "good" if value >= 0.5 else "bad"
    picture, truth = "", ""
    if sample is not None:
        kind = answer_kind(sample.data_source, sample.ground_truth, sample.extra_info)
        image = annotate(sample.images[0], kind, answer, sample.ground_truth, _tool_points(trajectory))
        picture = f"<img src='{png_data_url(image)}' alt='{html.escape(row['id'])}'>"
        truth = "(mask, drawn in green)" if kind == "mask" else _short(sample.ground_truth, 400)
    tool_pictures = "".join(
        f"<img class='thumb' src='{url}' alt='tool image'>" for url in row.get("tool_images", [])
    )
    details = {k: v for k, v in score.items() if k != "score"}
    error = trajectory.get("error")
    return (
        f"<details class='sample'><summary><span class='badge {badge}'>{value:.2f}</span> "
        f"<code>{html.escape(row['id'])}</code> {html.escape(_short(row['question'], 110))}</summary>"
        f"<div class='body'><div class='pic'>{picture}{tool_pictures}</div><div class='text'>"
        f"<p><b>Question.</b> {html.escape(row['question'])}</p>"
        f"<p><b>Answer</b> <span class='pred'>(red)</span>: <code>{html.escape(_short(answer, 400))}</code></p>"
        f"<p><b>Ground truth</b> <span class='truth'>(green)</span>: <code>{html.escape(truth)}</code></p>"
        f"<p><b>Score</b> {value:.3f} <span class='muted'>{html.escape(json.dumps(details))}</span></p>"
        f"<p class='muted'>{trajectory['turns']} turns, finished by {trajectory.get('finish_reason', '?')}, "
        f"{float(trajectory['wall_s']):.2f} s</p>"
        + (f"<p class='err'>policy error: {html.escape(error)}</p>" if error else "")
        + f"</div></div>{_tool_chain_html(trajectory)}</details>"
    )


def _summary_html(summary: Summary) -> str:
    rows = "".join(
        "<tr>"
        f"<td><b>{html.escape(b.key)}</b></td><td>{b.n}</td><td>{html.escape(format_metrics(b.metrics))}</td>"
        f"<td>{b.tool_calls_mean:.1f}</td><td>{b.tool_failures} ({b.tool_failure_rate:.0%})</td>"
        f"<td>{b.turns_mean:.1f}</td><td>{b.parse_errors}</td><td>{b.policy_errors}</td>"
        f"<td>{b.wall_s_mean:.2f}</td>"
        "</tr>"
        for b in summary.benchmarks.values()
    )
    return (
        "<table class='summary'><tr><th>benchmark</th><th>n</th><th>metrics</th><th>tool calls / episode</th>"
        "<th>tool failures</th><th>turns</th><th>parse errors</th><th>policy errors</th><th>s / episode</th></tr>"
        + rows
        + "</table>"
    )


def _usage_html(summary: Summary) -> str:
    tools = sorted({tool for b in summary.benchmarks.values() for tool in b.tool_calls_per_episode})
    if not tools:
        return ""
    header = "".join(f"<th>{html.escape(tool)}</th>" for tool in tools)
    rows = "".join(
        f"<tr><td><b>{html.escape(b.key)}</b></td>"
        + "".join(
            f"<td>{b.tool_calls_per_episode[t]:.2f}</td>" if t in b.tool_calls_per_episode else "<td></td>"
            for t in tools
        )
        + "</tr>"
        for b in summary.benchmarks.values()
    )
    return f"<h2>Tool calls per episode</h2><table class='usage'><tr><th>benchmark</th>{header}</tr>{rows}</table>"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1250px; color: #222; }
h1 { margin-bottom: 4px; } .muted { color: #777; font-size: 0.9em; }
table { border-collapse: collapse; margin: 8px 0 20px; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #f3f4f6; }
details.sample { border: 1px solid #ddd; border-radius: 6px; margin: 6px 0; padding: 4px 10px; }
details.sample summary { cursor: pointer; padding: 4px 0; }
.body { display: flex; gap: 16px; margin: 8px 0; } .pic img { display: block; border: 1px solid #ccc; }
.thumb { max-width: 180px; margin-top: 6px; } .text { flex: 1; }
.badge { display: inline-block; min-width: 38px; text-align: center; border-radius: 4px; color: white;
  font-weight: bold; padding: 1px 4px; } .good { background: #16a34a; } .bad { background: #dc2626; }
.pred { color: rgb(235, 40, 40); } .truth { color: rgb(20, 160, 70); } .err { color: #dc2626; font-weight: bold; }
table.chain pre { white-space: pre-wrap; margin: 0; max-width: 620px; font-size: 0.85em; }
table.chain code { font-size: 0.85em; word-break: break-all; }
"""


def render_report(
    summary: Summary,
    rows: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Sample],
    *,
    max_samples_per_benchmark: int = 40,
) -> str:
    """The report page as an HTML string (samples are looked up by row id for their images)."""
    sections = []
    for key in summary.benchmarks:
        bench_rows = [row for row in rows if row["data_source"] == key]
        shown = bench_rows[:max_samples_per_benchmark]
        cards = "".join(_sample_html(row, samples.get(row["id"])) for row in shown)
        more = (
            f"<p class='muted'>{len(bench_rows) - len(shown)} more samples in samples.jsonl</p>"
            if len(bench_rows) > len(shown)
            else ""
        )
        sections.append(f"<h2 id='{html.escape(key)}'>{html.escape(key)}</h2>{cards}{more}")
    legend = (
        "<p class='muted'>Pictures: <span class='truth'>green</span> = ground truth, "
        "<span class='pred'>red</span> = the policy's answer, <span style='color:rgb(40,120,255)'>blue +</span>"
        " = points the pointing tools returned.</p>"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>spacetools eval: {html.escape(summary.policy)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>Evaluation of <code>{html.escape(summary.policy)}</code></h1>"
        f"<p class='muted'>data {html.escape(summary.data)} · tools profile {html.escape(summary.profile)} · "
        f"{summary.n} samples · last run {summary.run_wall_s:.1f} s</p>"
        f"{_summary_html(summary)}{_usage_html(summary)}{legend}{''.join(sections)}</body></html>"
    )


def write_report(
    path: str | Path,
    summary: Summary,
    rows: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Sample],
    *,
    max_samples_per_benchmark: int = 40,
) -> Path:
    """Write ``report.html``; returns its path."""
    path = Path(path)
    path.write_text(
        render_report(summary, rows, samples, max_samples_per_benchmark=max_samples_per_benchmark),
        encoding="utf-8",
    )
    return path
