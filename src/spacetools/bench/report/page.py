"""The report page: summary, plots, tool usage and one card per sample (filtered and sorted in the
browser, :mod:`~spacetools.bench.report.browse`), from the templates ``report*.html`` of
``bench/templates/``, written so that any text survives.

A model's output can hold text UTF-8 cannot encode (a lone surrogate such as ``"\\ud800"`` is legal
JSON): the templates escape every text and make it printable (:mod:`spacetools.bench.pages`), and the
page is written to a temporary file that replaces ``report.html`` only when whole, so a failure never
leaves a 0-byte page. The full-size pictures go to ``report_files/`` beside it
(:mod:`~spacetools.bench.report.images`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spacetools.agent.protocol import truncate_middle
from spacetools.agent.types import assistant_text
from spacetools.bench.dataset import Sample
from spacetools.bench.pages import render_page
from spacetools.bench.report.browse import OUTCOMES, outcome
from spacetools.bench.report.drawing import annotate, answer_kind, focus_region, one_line
from spacetools.bench.report.images import SIDE_FOLDER, ReportImages
from spacetools.bench.report.plots import plots
from spacetools.bench.report.toolchain import ChainRow, tool_chain, tool_points
from spacetools.bench.summary import Summary, format_metrics, short_name
from spacetools.rewards.extraction import extract_answer

SUMMARY_QUESTION_CHARS = 110
ANSWER_CHARS = 400


@dataclass(frozen=True)
class SamplePictures:
    """A sample's annotated picture: its thumbnail, its full size's side file (None: none) and a zoom
    on the answer and the truth (None when they are not small)."""

    thumbnail: str
    full: str | None
    zoom: str | None


@dataclass(frozen=True)
class SampleCard:
    """What a sample's card shows (``templates/report_sample.html``)."""

    id: str
    position: int
    family: str
    outcome: str
    score: float
    question: str
    question_line: str
    answer: str
    truth: str
    details: str
    turns: int
    finish_reason: str
    wall_s: float
    error: str | None
    pictures: SamplePictures | None
    chain: list[ChainRow]


def _answer_text(trajectory: Mapping[str, Any]) -> str:
    """The episode's final answer, read as the scorer reads it."""
    return extract_answer(assistant_text(trajectory["messages"])).text


def _pictures(row: Mapping[str, Any], sample: Sample, answer: str, images: ReportImages) -> SamplePictures:
    """The annotated picture (a click opens it at full size) and, when the answer is small, a zoom."""
    kind = answer_kind(sample.data_source, sample.ground_truth)
    pointed = tool_points(row["trajectory"])
    image = sample.images[0]
    full = None
    if images.side_files:
        drawn = annotate(image, kind, answer, sample.ground_truth, pointed, width=image.shape[1])
        full = images.side_file(str(row["id"]), drawn)
    region = focus_region(kind, answer, sample.ground_truth)
    zoom = None
    if region is not None:
        zoom = images.thumbnail(annotate(image, kind, answer, sample.ground_truth, pointed, region=region))
    thumbnail = images.thumbnail(annotate(image, kind, answer, sample.ground_truth, pointed))
    return SamplePictures(thumbnail, full, zoom)


def _card(row: Mapping[str, Any], sample: Sample | None, position: int, images: ReportImages) -> SampleCard:
    trajectory = row["trajectory"]
    score = row["score"]
    answer = _answer_text(trajectory)
    pictures, truth = None, ""
    if sample is not None:
        pictures = _pictures(row, sample, answer, images)
        kind = answer_kind(sample.data_source, sample.ground_truth)
        truth = (
            "(mask, drawn in green)" if kind == "mask" else truncate_middle(sample.ground_truth, ANSWER_CHARS)
        )
    return SampleCard(
        id=str(row["id"]),
        position=position,
        family=short_name(str(row["data_source"])),
        outcome=outcome(row),
        score=float(score.get("score", 0.0)),
        question=str(row["question"]),
        question_line=one_line(str(row["question"]), SUMMARY_QUESTION_CHARS),
        answer=truncate_middle(answer, ANSWER_CHARS),
        truth=truth,
        details=json.dumps({k: v for k, v in score.items() if k != "score"}),
        turns=int(trajectory["turns"]),
        finish_reason=str(trajectory.get("finish_reason", "?")),
        wall_s=float(trajectory["wall_s"]),
        error=trajectory.get("error") or None,
        pictures=pictures,
        chain=tool_chain(row, sample, images),
    )


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
    cards = [_card(row, samples.get(row["id"]), position, images) for position, row in enumerate(shown)]
    benchmarks = list(summary.benchmarks.values())
    return render_page(
        "report.html",
        summary=summary,
        benchmarks=benchmarks,
        charts=plots(summary),
        tools=sorted({tool for b in benchmarks for tool in b.tool_calls_per_episode}),
        families=[short_name(b.key) for b in benchmarks],
        outcomes=OUTCOMES,
        counts=Counter(card.outcome for card in cards),
        cards=cards,
        left_out=left_out,
        side_folder=SIDE_FOLDER,
        short_name=short_name,
        format_metrics=format_metrics,
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
    data = page.encode("utf-8", "replace")  # the page's texts are printable already; this is the last guard
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
