"""``report.html``: one self-contained page per evaluation run.

The page has the summary table, the tool usage per benchmark and, per sample, the image annotated
with the predicted (red) and true (green) geometry (points, mask outline, box corners with edges,
grasp lines, 2D boxes; a yes/no or multiple-choice answer is written under the image against the
truth) plus the points the pointing tools reported (blue), the question, the answer, the score and
the tool chain: each call, its arguments, the result text, the error flag and the picture the tool
returned (a fitted 3D box, which returns none, is drawn from its corners). Images are embedded as
base64, so the file can be mailed or archived as it is.
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
from PIL import Image, ImageDraw, ImageFont

from spacetools.agent.policies.scripted import ToolOutcome, read_box, read_grasp
from spacetools.agent.protocol import truncate_middle
from spacetools.agent.types import assistant_text
from spacetools.bench.dataset import Sample
from spacetools.bench.summary import Summary, format_metrics
from spacetools.rewards.extraction import extract_answer
from spacetools.rewards.formats import format_grasp, parse_boxes, parse_grasp, parse_points, parse_yes_no
from spacetools.rewards.masks import load_mask

TRUTH = (20, 190, 80)
PREDICTED = (235, 40, 40)
TOOL_POINT = (40, 120, 255)
IMAGE_WIDTH = 400
TOOL_IMAGE_WIDTH = 320
RESULT_CHARS = 600
SUMMARY_QUESTION_CHARS = 110

# Edges of a BOP-ordered box: bottom face, top face, verticals.
BOX_EDGES = [(i, (i + 1) % 4) for i in range(4)] + [(4 + i, 4 + (i + 1) % 4) for i in range(4)]
BOX_EDGES += [(i, i + 4) for i in range(4)]
# Gripper drawn as the palm line between the finger bases and the two fingers.
GRASP_LINES = [(1, 2), (1, 3), (2, 4)]
POINTING_TOOLS = ("roborefer.detect_one", "roborefer.detect_all", "vlm.detect_one", "vlm.detect_all")
BOX_TOOL = "bounding_box.compute_bbox"
GRASP_TOOL = "grasp_generator.compute_grasp"


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


Region = tuple[float, float, float, float]
#: The whole image, as a normalized ``(x0, y0, x1, y1)`` region.
FULL: Region = (0.0, 0.0, 1.0, 1.0)
#: A zoomed view is drawn only when what it shows spans less than this much of the image.
ZOOM_MAX_SPAN = 0.6


def _pixels(
    points: Sequence[Sequence[float]], size: tuple[int, int], region: Region = FULL
) -> list[tuple[float, float]]:
    """Normalized image points as pixels of a canvas of ``size`` showing ``region`` of the image."""
    width, height = size
    x0, y0, x1, y1 = region
    return [((float(x) - x0) / (x1 - x0) * width, (float(y) - y0) / (y1 - y0) * height) for x, y in points]


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


def _crop(image: Image.Image, region: Region) -> Image.Image:
    """The part of ``image`` that ``region`` covers."""
    x0, y0, x1, y1 = region
    box = (
        round(x0 * image.width),
        round(y0 * image.height),
        round(x1 * image.width),
        round(y1 * image.height),
    )
    return image if box == (0, 0, image.width, image.height) else image.crop(box)


def _draw_mask(canvas: Image.Image, mask: np.ndarray, region: Region = FULL) -> Image.Image:
    """A translucent green fill and a solid outline of ``mask`` (its ``region``), resized to the canvas."""
    picture = _crop(Image.fromarray(mask.astype(np.uint8) * 255), region)
    small = np.asarray(picture.resize(canvas.size, Image.Resampling.NEAREST)) > 0
    interior = small.copy()
    interior[1:-1, 1:-1] = (
        small[1:-1, 1:-1] & small[:-2, 1:-1] & small[2:, 1:-1] & small[1:-1, :-2] & small[1:-1, 2:]
    )
    pixels = np.asarray(canvas).astype(np.float32)
    pixels[small] = 0.65 * pixels[small] + 0.35 * np.array(TRUTH)
    pixels[small & ~interior] = TRUTH
    return Image.fromarray(pixels.astype(np.uint8))


def _draw_geometry(
    draw: ImageDraw.ImageDraw,
    kind: str,
    text: str,
    color: tuple[int, int, int],
    size: tuple[int, int],
    region: Region = FULL,
) -> None:
    """Draw what ``text`` says in the format of ``kind`` (nothing when it does not parse)."""
    if kind == "corners":
        corners = _pixels(parse_points(text), size, region)
        if len(corners) == 8:
            for a, b in BOX_EDGES:
                draw.line([corners[a], corners[b]], fill=color, width=2)
        for corner in corners:
            _dot(draw, corner, color, r=3)
    elif kind == "grasp":
        grasp = parse_grasp(text)
        if grasp is not None:
            points = _pixels(grasp.tolist(), size, region)
            for a, b in GRASP_LINES:
                draw.line([points[a], points[b]], fill=color, width=3)
            _dot(draw, points[0], color)
    elif kind == "boxes":
        for x1, y1, x2, y2 in parse_boxes(text):
            (left, top), (right, bottom) = _pixels([(x1, y1), (x2, y2)], size, region)
            draw.rectangle([left, top, right, bottom], outline=color, width=2)
    elif kind in ("points", "mask"):
        for point in _pixels(parse_points(text), size, region):
            _dot(draw, point, color)


def annotate(
    image: np.ndarray,
    kind: str,
    answer: str,
    ground_truth: str,
    tool_points: Sequence[Sequence[float]] = (),
    width: int = IMAGE_WIDTH,
    region: Region = FULL,
) -> Image.Image:
    """The sample image (its ``region``, scaled to ``width``) with truth (green), prediction (red) and
    tool points (blue); yes/no and multiple-choice verdicts are written under it."""
    canvas = _crop(Image.fromarray(image), region)
    canvas = canvas.resize(
        (width, max(1, round(canvas.height * width / canvas.width))), Image.Resampling.BILINEAR
    )
    if kind == "mask":
        # An unreadable mask is left out of the picture; the text cell still shows the row.
        with contextlib.suppress(ValueError, OSError):
            canvas = _draw_mask(canvas, load_mask(ground_truth), region)
    draw = ImageDraw.Draw(canvas)
    if kind != "mask":
        _draw_geometry(draw, kind, ground_truth, TRUTH, canvas.size, region)
    for point in _pixels(tool_points, canvas.size, region):
        _cross(draw, point, TOOL_POINT)
    _draw_geometry(draw, kind, answer, PREDICTED, canvas.size, region)
    if kind in ("yesno", "choice", "text"):
        canvas = _with_banner(canvas, answer, ground_truth)
    return canvas


def _geometry_points(kind: str, text: str) -> list[tuple[float, float]]:
    """The normalized points an answer or a ground truth of ``kind`` draws (a mask: its bounding box)."""
    if kind == "grasp":
        grasp = parse_grasp(text)
        return [] if grasp is None else [(float(x), float(y)) for x, y in grasp.tolist()]
    if kind == "boxes":
        return [corner for x1, y1, x2, y2 in parse_boxes(text) for corner in ((x1, y1), (x2, y2))]
    if kind == "mask" and text.startswith("data:image"):
        with contextlib.suppress(ValueError, OSError):
            mask = load_mask(text)
            rows, cols = np.nonzero(mask)
            if rows.size:
                height, width = mask.shape
                return [
                    (cols.min() / width, rows.min() / height),
                    ((cols.max() + 1) / width, (rows.max() + 1) / height),
                ]
        return []
    if kind in ("corners", "points", "mask"):
        return [(float(x), float(y)) for x, y in parse_points(text)]
    return []


def focus_region(kind: str, answer: str, ground_truth: str, margin: float = 0.06) -> Region | None:
    """A square (in normalized units, so undistorted) region around the answer and the truth, for a
    zoomed view; None when there is nothing to zoom on or it would cover most of the image."""
    points = [
        (x, y)
        for x, y in _geometry_points(kind, answer) + _geometry_points(kind, ground_truth)
        if 0.0 <= x <= 1.0 and 0.0 <= y <= 1.0
    ]
    return _square_around(points, margin)


def _square_around(points: Sequence[tuple[float, float]], margin: float = 0.06) -> Region | None:
    """The smallest square region (normalized units) holding ``points`` plus ``margin``, inside the
    image; None for no points or a square wider than :data:`ZOOM_MAX_SPAN`."""
    if not points:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    side = max(max(xs) - min(xs), max(ys) - min(ys), 0.08) + 2 * margin
    if side > ZOOM_MAX_SPAN:
        return None
    x0 = min(max((min(xs) + max(xs) - side) / 2, 0.0), 1.0 - side)
    y0 = min(max((min(ys) + max(ys) - side) / 2, 0.0), 1.0 - side)
    return (x0, y0, x0 + side, y0 + side)


def _with_banner(canvas: Image.Image, answer: str, ground_truth: str) -> Image.Image:
    """The picture with a strip below it reading the answer (red) against the truth (green)."""
    font = ImageFont.load_default(size=15)
    strip = 24
    framed = Image.new("RGB", (canvas.width, canvas.height + strip), (255, 255, 255))
    framed.paste(canvas, (0, 0))
    draw = ImageDraw.Draw(framed)
    said = f"answer: {_one_line(answer, 20)}"
    draw.text((6, canvas.height + 4), said, fill=PREDICTED, font=font)
    offset = 24 + draw.textlength(said, font=font)
    draw.text((offset, canvas.height + 4), f"truth: {_one_line(ground_truth, 20)}", fill=TRUTH, font=font)
    return framed


def _one_line(text: str, limit: int) -> str:
    """``text`` on one line, a clean prefix ending in "…" when longer than ``limit``."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,.;:") + "…"


def tool_geometry_picture(
    image: np.ndarray, name: str, result_text: str, value: Any = None
) -> tuple[Image.Image, str] | None:
    """A zoomed view of the geometry a box fit or a grasp reports, drawn by the report from the result's
    structured value (a box fit returns no picture; a grasp's own picture is too small to read the
    gripper), and its caption; None for other tools or a result without readable geometry."""
    outcome = ToolOutcome(result_text, result_text.startswith("Error"), value)
    if name == BOX_TOOL:
        box = read_box(outcome)
        kind, points = "corners", box.corners_2d if box is not None else None
        caption = "the fitted box's image corners (zoomed, drawn by the report)"
    elif name == GRASP_TOOL:
        kind, points = "grasp", read_grasp(outcome)
        caption = "the grasp's gripper points (zoomed, drawn by the report)"
    else:
        return None
    if points is None:
        return None
    text = format_grasp(points) if kind == "grasp" else repr(points)
    region = _square_around(points) or FULL
    canvas = _crop(Image.fromarray(image), region)
    canvas = canvas.resize((TOOL_IMAGE_WIDTH, max(1, round(canvas.height * TOOL_IMAGE_WIDTH / canvas.width))))
    _draw_geometry(ImageDraw.Draw(canvas), kind, text, TOOL_POINT, canvas.size, region)
    return canvas, caption


def png_data_url(image: Image.Image) -> str:
    """A base64 PNG data URL (palette-quantized: the page stays small)."""
    buffer = io.BytesIO()
    image.quantize(colors=256).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _tool_points(trajectory: Mapping[str, Any]) -> list[tuple[float, float]]:
    return [
        point
        for call in trajectory["tool_calls"]
        if call["name"] in POINTING_TOOLS and not call["is_error"] and isinstance(call.get("value"), dict)
        for point in call["value"].get("points", [])
    ]


def _answer_text(trajectory: Mapping[str, Any]) -> str:
    return extract_answer(assistant_text(trajectory["messages"])).text


def _tool_pictures(row: Mapping[str, Any], sample: Sample | None) -> list[list[tuple[str, str]]]:
    """Per tool call, its pictures as ``(data URL, caption)``: those the tool returned, then for a box
    fit or a grasp a zoomed view of its geometry (:func:`tool_geometry_picture`)."""
    trajectory = row["trajectory"]
    thumbnails = row.get("tool_images", [])
    first = int(trajectory.get("task_image_count", 1))
    pictures: list[list[tuple[str, str]]] = []
    for call in trajectory["tool_calls"]:
        urls = [
            thumbnails[i - first] for i in call.get("image_indices", []) if 0 <= i - first < len(thumbnails)
        ]
        shown = [(url, f"{call['name']} returned this picture") for url in urls]
        if not call["is_error"] and sample is not None:
            drawn = tool_geometry_picture(
                sample.images[0], call["name"], call["result_text"], call.get("value")
            )
            if drawn is not None:
                shown.append((png_data_url(drawn[0]), drawn[1]))
        pictures.append(shown)
    return pictures


def _tool_chain_html(row: Mapping[str, Any], sample: Sample | None) -> str:
    """Each call of the episode: turn, tool, arguments, result text, status, latency and pictures."""
    trajectory = row["trajectory"]
    if not trajectory["tool_calls"]:
        return "<p class='muted'>no tool calls</p>"
    rows = []
    for call, pictures in zip(trajectory["tool_calls"], _tool_pictures(row, sample), strict=True):
        status = "<span class='err'>error</span>" if call["is_error"] else "ok"
        images = "".join(
            f"<img class='thumb' src='{url}' alt='{html.escape(caption)}' title='{html.escape(caption)}'>"
            for url, caption in pictures
        )
        rows.append(
            "<tr>"
            f"<td>{call['turn']}</td><td><code>{html.escape(call['name'])}</code></td>"
            f"<td><code>{html.escape(json.dumps(call['arguments']))}</code></td>"
            f"<td><pre>{html.escape(truncate_middle(call['result_text'], RESULT_CHARS))}</pre></td>"
            f"<td>{status}</td><td>{1000 * float(call['latency_s']):.0f} ms</td><td>{images}</td>"
            "</tr>"
        )
    # Rows written before calls recorded their pictures: show the pictures together after the chain.
    unplaced = ""
    if row.get("tool_images") and not any(call.get("image_indices") for call in trajectory["tool_calls"]):
        unplaced = "".join(
            f"<img class='thumb' src='{url}' alt='tool picture'>" for url in row["tool_images"]
        )
    return (
        "<table class='chain'><colgroup><col style='width:40px'><col style='width:150px'>"
        "<col style='width:190px'><col><col style='width:40px'><col style='width:64px'>"
        "<col style='width:330px'></colgroup><tr><th>turn</th><th>tool</th><th>arguments</th>"
        "<th>result</th><th></th><th>latency</th><th>picture</th></tr>"
        + "".join(rows)
        + "</table>"
        + unplaced
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
        tool_points = _tool_points(trajectory)
        image = annotate(sample.images[0], kind, answer, sample.ground_truth, tool_points)
        picture = f"<img src='{png_data_url(image)}' alt='{html.escape(row['id'])}'>"
        region = focus_region(kind, answer, sample.ground_truth)
        if region is not None:
            zoom = annotate(sample.images[0], kind, answer, sample.ground_truth, tool_points, region=region)
            picture += (
                f"<img src='{png_data_url(zoom)}' alt='zoom' title='zoomed on the answer and the truth'>"
            )
        truth = "(mask, drawn in green)" if kind == "mask" else truncate_middle(sample.ground_truth, 400)
    details = {k: v for k, v in score.items() if k != "score"}
    error = trajectory.get("error")
    return (
        f"<details class='sample'><summary><span class='badge {badge}'>{value:.2f}</span> "
        f"<code>{html.escape(row['id'])}</code> "
        f"{html.escape(_one_line(row['question'], SUMMARY_QUESTION_CHARS))}</summary>"
        f"<div class='body'><div class='pic'>{picture}</div><div class='text'>"
        f"<p><b>Question.</b> {html.escape(row['question'])}</p>"
        f"<p><b>Answer</b> <span class='pred'>(red)</span>: "
        f"<code>{html.escape(truncate_middle(answer, 400))}</code></p>"
        f"<p><b>Ground truth</b> <span class='truth'>(green)</span>: <code>{html.escape(truth)}</code></p>"
        f"<p><b>Score</b> {value:.3f} <span class='muted'>{html.escape(json.dumps(details))}</span></p>"
        f"<p class='muted'>{trajectory['turns']} turns, finished by {trajectory.get('finish_reason', '?')}, "
        f"{float(trajectory['wall_s']):.2f} s</p>"
        + (f"<p class='err'>error: {html.escape(error)}</p>" if error else "")
        + f"</div></div>{_tool_chain_html(row, sample)}</details>"
    )


def _summary_html(summary: Summary) -> str:
    rows = "".join(
        "<tr>"
        f"<td><b>{html.escape(_short_key(b.key))}</b></td><td>{b.n}</td><td>{html.escape(format_metrics(b.metrics))}</td>"
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
    """Tool calls per episode: one row per tool, one column per benchmark."""
    tools = sorted({tool for b in summary.benchmarks.values() for tool in b.tool_calls_per_episode})
    if not tools:
        return ""
    benches = list(summary.benchmarks.values())
    header = "".join(f"<th>{html.escape(_short_key(b.key))}</th>" for b in benches)
    rows = "".join(
        f"<tr><td><code>{html.escape(tool)}</code></td>"
        + "".join(
            f"<td>{b.tool_calls_per_episode[tool]:.2f}</td>"
            if tool in b.tool_calls_per_episode
            else "<td></td>"
            for b in benches
        )
        + "</tr>"
        for tool in tools
    )
    return f"<h2>Tool calls per episode</h2><table class='usage'><tr><th>tool</th>{header}</tr>{rows}</table>"


def _short_key(key: str) -> str:
    return key.removeprefix("spatialsim_")


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; padding: 0 12px; max-width: 1200px; color: #222; }
h1 { margin-bottom: 4px; } .muted { color: #777; font-size: 0.9em; }
table { border-collapse: collapse; margin: 8px 0 20px; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #f3f4f6; }
details.sample { border: 1px solid #ddd; border-radius: 6px; margin: 6px 0; padding: 4px 10px; }
details.sample summary { cursor: pointer; padding: 4px 0; }
.body { display: flex; gap: 16px; margin: 8px 0; } .pic img { display: block; border: 1px solid #ccc; }
.pic img + img { margin-top: 6px; } .text { flex: 1; }
.thumb { max-width: 320px; display: block; margin: 2px 0; }
.badge { display: inline-block; min-width: 38px; text-align: center; border-radius: 4px; color: white;
  font-weight: bold; padding: 1px 4px; } .good { background: #16a34a; } .bad { background: #dc2626; }
.pred { color: rgb(235, 40, 40); } .truth { color: rgb(20, 160, 70); } .err { color: #dc2626; font-weight: bold; }
table.chain { width: 100%; table-layout: fixed; }
table.chain pre { white-space: pre-wrap; word-break: break-word; margin: 0; font-size: 0.85em; }
table.chain code { font-size: 0.85em; word-break: break-word; }
table.usage { font-size: 0.85em; } table.usage td + td { text-align: right; }
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
    order = {key: position for position, key in enumerate(samples)}  # the data's order, not finishing order
    for key in summary.benchmarks:
        bench_rows = sorted(
            (row for row in rows if row["data_source"] == key),
            key=lambda row: order.get(row["id"], len(order)),
        )
        shown = bench_rows[:max_samples_per_benchmark]
        cards = "".join(_sample_html(row, samples.get(row["id"])) for row in shown)
        more = (
            f"<p class='muted'>{len(bench_rows) - len(shown)} more samples in samples.jsonl</p>"
            if len(bench_rows) > len(shown)
            else ""
        )
        sections.append(f"<h2 id='{html.escape(key)}'>{html.escape(key)}</h2>{cards}{more}")
    legend = (
        "<p class='muted'>Each sample's picture: <span class='truth'>green</span> = ground truth, "
        "<span class='pred'>red</span> = the policy's answer, <span style='color:rgb(40,120,255)'>blue +</span>"
        " = points the pointing tools returned; yes/no and multiple-choice answers are written under it. "
        "Click a sample to open it: its tool chain lists every call with its arguments, result and the "
        "picture the tool made (points, mask, depth map, fitted box, gripper).</p>"
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
