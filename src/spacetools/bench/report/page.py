"""The report page: summary, plots, tool usage and one card per sample (filtered and sorted in the
browser, :mod:`~spacetools.bench.report.browse`), written so that any text survives.

A model's output can hold text UTF-8 cannot encode (a lone surrogate such as ``"\\ud800"`` is legal
JSON): every text is escaped and made printable, and the page is written to a temporary file that
replaces ``report.html`` only when whole, so a failure never leaves a 0-byte page. The full-size
pictures go to ``report_files/`` beside it (:mod:`~spacetools.bench.report.images`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spacetools.agent.protocol import truncate_middle
from spacetools.agent.types import assistant_text
from spacetools.bench.dataset import Sample
from spacetools.bench.report.browse import SCRIPT, controls_html, outcome
from spacetools.bench.report.drawing import annotate, answer_kind, focus_region, one_line
from spacetools.bench.report.images import SIDE_FOLDER, ReportImages
from spacetools.bench.report.plots import plots_html
from spacetools.bench.report.toolchain import escape, tool_chain_html, tool_points
from spacetools.bench.summary import Summary, format_metrics, short_name
from spacetools.rewards.extraction import extract_answer

SUMMARY_QUESTION_CHARS = 110


def _answer_text(trajectory: Mapping[str, Any]) -> str:
    """The episode's final answer, read as the scorer reads it."""
    return extract_answer(assistant_text(trajectory["messages"])).text


def _pictures_html(row: Mapping[str, Any], sample: Sample, answer: str, images: ReportImages) -> str:
    """The annotated picture (a click opens it at full size) and, when the answer is small, a zoom."""
    kind = answer_kind(sample.data_source, sample.ground_truth)
    pointed = tool_points(row["trajectory"])
    image = annotate(sample.images[0], kind, answer, sample.ground_truth, pointed)
    picture = f"<img src='{images.thumbnail(image)}' alt='{escape(row['id'])}'>"
    if images.side_files:
        full_width = sample.images[0].shape[1]
        full = annotate(sample.images[0], kind, answer, sample.ground_truth, pointed, width=full_width)
        link = escape(images.side_file(str(row["id"]), full))
        picture = f"<a href='{link}' target='_blank' title='full size'>{picture}</a>"
    region = focus_region(kind, answer, sample.ground_truth)
    if region is not None:
        zoom = annotate(sample.images[0], kind, answer, sample.ground_truth, pointed, region=region)
        picture += (
            f"<img src='{images.thumbnail(zoom)}' alt='zoom' title='zoomed on the answer and the truth'>"
        )
    return picture


def _sample_html(row: Mapping[str, Any], sample: Sample | None, position: int, images: ReportImages) -> str:
    trajectory = row["trajectory"]
    score = row["score"]
    answer = _answer_text(trajectory)
    value = float(score.get("score", 0.0))
    result = outcome(row)
    picture, truth = "", ""
    if sample is not None:
        picture = _pictures_html(row, sample, answer, images)
        kind = answer_kind(sample.data_source, sample.ground_truth)
        truth = "(mask, drawn in green)" if kind == "mask" else truncate_middle(sample.ground_truth, 400)
    details = {k: v for k, v in score.items() if k != "score"}
    error = trajectory.get("error")
    family = short_name(str(row["data_source"]))
    return (
        f"<details class='sample' data-family='{escape(family)}' data-outcome='{result}' "
        f"data-score='{value:.6g}' data-order='{position}'><summary>"
        f"<span class='badge {result}' title='{result}'>{value:.2f}</span> "
        f"<span class='family'>{escape(family)}</span> <code>{escape(row['id'])}</code> "
        f"{escape(one_line(row['question'], SUMMARY_QUESTION_CHARS))}</summary>"
        f"<div class='body'><div class='pic'>{picture}</div><div class='text'>"
        f"<p><b>Question.</b> {escape(row['question'])}</p>"
        f"<p><b>Answer</b> <span class='pred'>(red)</span>: "
        f"<code>{escape(truncate_middle(answer, 400))}</code></p>"
        f"<p><b>Ground truth</b> <span class='truth'>(green)</span>: <code>{escape(truth)}</code></p>"
        f"<p><b>Score</b> {value:.3f} <span class='muted'>{escape(json.dumps(details))}</span></p>"
        f"<p class='muted'>{trajectory['turns']} turns, finished by {trajectory.get('finish_reason', '?')}, "
        f"{float(trajectory['wall_s']):.2f} s</p>"
        + (f"<p class='err'>error: {escape(error)}</p>" if error else "")
        + f"</div></div>{tool_chain_html(row, sample, images)}</details>"
    )


def _summary_html(summary: Summary) -> str:
    rows = "".join(
        f"<tr id='{escape(b.key)}'>"
        f"<td><b>{escape(short_name(b.key))}</b></td><td>{b.n}</td>"
        f"<td>{escape(format_metrics(b.metrics, b.intervals))}</td>"
        f"<td>{b.tool_calls_mean:.1f}</td><td>{b.tool_failures} ({b.tool_failure_rate:.0%})</td>"
        f"<td>{b.turns_mean:.1f}</td><td>{b.invalid_turns}</td><td>{b.parse_errors}</td><td>{b.policy_errors}</td>"
        f"<td>{b.wall_s_mean:.2f}</td>"
        "</tr>"
        for b in summary.benchmarks.values()
    )
    return (
        "<table class='summary'><tr><th>benchmark</th><th>n</th><th>metrics [95% interval]</th><th>tool calls / episode</th>"
        "<th>tool failures</th><th>turns</th><th>invalid turns</th><th>parse errors</th><th>policy errors</th>"
        "<th>s / episode</th></tr>" + rows + "</table>"
    )


def _usage_html(summary: Summary) -> str:
    """Tool calls per episode: one row per tool, one column per benchmark."""
    tools = sorted({tool for b in summary.benchmarks.values() for tool in b.tool_calls_per_episode})
    if not tools:
        return ""
    benches = list(summary.benchmarks.values())
    header = "".join(f"<th>{escape(short_name(b.key))}</th>" for b in benches)
    rows = "".join(
        f"<tr><td><code>{escape(tool)}</code></td>"
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
  font-weight: bold; padding: 1px 4px; } .pass { background: #16a34a; } .fail { background: #dc2626; }
.badge.error { background: #b45309; }
.family { display: inline-block; min-width: 96px; color: #555; font-size: 0.85em; }
#controls { position: sticky; top: 0; background: white; padding: 8px 0; display: flex; gap: 16px;
  align-items: center; border-bottom: 1px solid #ddd; z-index: 1; }
.plots { display: flex; flex-wrap: wrap; gap: 24px; margin-bottom: 20px; }
.pred { color: rgb(235, 40, 40); } .truth { color: rgb(20, 160, 70); } .err { color: #dc2626; font-weight: bold; }
table.chain { width: 100%; table-layout: fixed; }
table.chain pre { white-space: pre-wrap; word-break: break-word; margin: 0; font-size: 0.85em; }
table.chain code { font-size: 0.85em; word-break: break-word; }
table.usage { font-size: 0.85em; } table.usage td + td { text-align: right; }
"""


def _shown_rows(
    summary: Summary,
    rows: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Sample],
    max_samples_per_benchmark: int | None,
) -> tuple[list[Mapping[str, Any]], int]:
    """The rows with a card, by benchmark then in the data's order (not finishing order), and how many
    rows the cap left out."""
    order = {key: position for position, key in enumerate(samples)}
    shown: list[Mapping[str, Any]] = []
    left_out = 0
    for key in summary.benchmarks:
        bench_rows = sorted(
            (row for row in rows if row["data_source"] == key),
            key=lambda row: order.get(row["id"], len(order)),
        )
        kept = bench_rows if max_samples_per_benchmark is None else bench_rows[:max_samples_per_benchmark]
        shown.extend(kept)
        left_out += len(bench_rows) - len(kept)
    return shown, left_out


def render_report(
    summary: Summary,
    rows: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Sample],
    *,
    max_samples_per_benchmark: int | None = None,
    images: ReportImages | None = None,
) -> str:
    """The report page as an HTML string (samples are looked up by row id for their images). With
    ``images`` the full-size pictures are collected there for :func:`write_report`; without, the page
    holds thumbnails only."""
    images = images if images is not None else ReportImages(side_files=False)
    shown, left_out = _shown_rows(summary, rows, samples, max_samples_per_benchmark)
    cards = "".join(
        _sample_html(row, samples.get(row["id"]), position, images) for position, row in enumerate(shown)
    )
    more = f"<p class='muted'>{left_out} more samples in samples.jsonl</p>" if left_out else ""
    families = [short_name(key) for key in summary.benchmarks]
    counts = Counter(outcome(row) for row in shown)
    legend = (
        "<p class='muted'>Each sample's picture: <span class='truth'>green</span> = ground truth, "
        "<span class='pred'>red</span> = the policy's answer, <span style='color:rgb(40,120,255)'>blue +</span>"
        " = points the pointing tools returned; yes/no and multiple-choice answers are written under it. "
        "Click a sample to open it: its tool chain lists every call with its arguments, result and the "
        "picture the tool made (points, mask, depth map, fitted box, gripper); click its picture for the "
        f"full size ({SIDE_FOLDER}/ beside this page).</p>"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>spacetools eval: {escape(summary.policy)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>Evaluation of <code>{escape(summary.policy)}</code></h1>"
        f"<p class='muted'>data {escape(summary.data)} · tools profile {escape(summary.profile)} · "
        f"{summary.n} samples · last run {summary.run_wall_s:.1f} s</p>"
        f"{_summary_html(summary)}{plots_html(summary)}{_usage_html(summary)}"
        f"<h2 id='samples-heading'>Samples</h2>{legend}{controls_html(families, counts)}"
        f"<div id='samples'>{cards}</div>{more}<script>{SCRIPT}</script></body></html>"
    )


def write_report(
    path: str | Path,
    summary: Summary,
    rows: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Sample],
    *,
    max_samples_per_benchmark: int | None = None,
) -> Path:
    """Write ``report.html`` and its full-size pictures in ``report_files/``; returns the page's path."""
    path = Path(path)
    images = ReportImages()
    page = render_report(
        summary, rows, samples, max_samples_per_benchmark=max_samples_per_benchmark, images=images
    )
    _write_side_files(path.parent / SIDE_FOLDER, images.files)
    data = page.encode("utf-8", "replace")  # the cards are printable already; this is the last guard
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".report-", suffix=".html")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _write_side_files(folder: Path, files: Mapping[str, bytes]) -> None:
    """Replace ``folder`` with one holding ``files`` (none: no folder), so no picture of an earlier
    report is left behind."""
    fresh = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".report-files-"))
    try:
        for name, content in files.items():
            (fresh / name).write_bytes(content)
        if folder.is_dir():
            shutil.rmtree(folder)
        if files:
            fresh.chmod(0o755)  # mkdtemp's 0700 would hide the pictures from a web server of the run folder
            fresh.rename(folder)
    finally:
        if fresh.exists():
            shutil.rmtree(fresh)
