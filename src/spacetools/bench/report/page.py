"""The report page: summary, plots, tool usage and one card per sample (filtered and sorted in the
browser, :mod:`~spacetools.bench.report.browse`), from the templates ``report*.html`` of
``bench/templates/``, written so that any text survives. The cards come built already where an
evaluation built them as its episodes ended (:mod:`~spacetools.bench.report.cards`): the page stitches.

A model's output can hold text UTF-8 cannot encode (a lone surrogate such as ``"\\ud800"`` is legal
JSON): the templates escape every text and make it printable (:mod:`spacetools.bench.pages`), and the
page is written to a temporary file that replaces ``report.html`` only when whole, so a failure never
leaves a 0-byte page. The full-size pictures go to ``report_files/`` beside it
(:mod:`~spacetools.bench.report.images`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spacetools.bench.dataset import Sample
from spacetools.bench.pages import render_page
from spacetools.bench.report.browse import OUTCOMES
from spacetools.bench.report.cards import BuiltCard, build_card, placed
from spacetools.bench.report.images import SIDE_FOLDER, ReportImages
from spacetools.bench.report.plots import plots
from spacetools.bench.summary import Summary, format_metrics, short_name

#: A report is for reading: world-readable, as a file written with the usual umask is.
REPORT_MODE = 0o644
STAGING_PREFIX = ".report-files-"
"""The side files are written into a hidden folder of this prefix, then swapped in; a kill leaves one."""


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
    cards: Mapping[str, BuiltCard] | None = None,
) -> str:
    """The report page as an HTML string (samples are looked up by row id for their images). With
    ``images`` the full-size pictures are collected there for :func:`write_report`; without, the page
    holds thumbnails only. ``cards``: the rows' cards built already, by sample id (built with side
    files: pass ``images`` with them); the others are built here."""
    images = images if images is not None else ReportImages(side_files=False)
    shown, left_out = _shown_rows(summary, rows, samples, max_samples_per_benchmark)
    built = cards or {}
    sample_cards = [
        placed(
            built.get(row["id"]) or build_card(row, samples.get(row["id"]), side_files=images.side_files),
            images,
        )
        for row in shown
    ]
    benchmarks = list(summary.benchmarks.values())
    return render_page(
        "report.html",
        summary=summary,
        benchmarks=benchmarks,
        charts=plots(summary),
        tools=sorted({tool for b in benchmarks for tool in b.tool_calls_per_episode}),
        families=[short_name(b.key) for b in benchmarks],
        outcomes=OUTCOMES,
        counts=Counter(card.outcome for card in sample_cards),
        cards=sample_cards,
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
    cards: Mapping[str, BuiltCard] | None = None,
) -> Path:
    """Write ``report.html`` and its full-size pictures in ``report_files/``; returns the page's path.
    ``cards``: the rows' cards built already (an evaluation's, :class:`~spacetools.bench.report.cards.
    CardBuilder`), by sample id; the others are built here."""
    path = Path(path)
    images = ReportImages()
    page = render_report(
        summary,
        rows,
        samples,
        max_samples_per_benchmark=max_samples_per_benchmark,
        images=images,
        cards=cards,
    )
    _write_side_files(path.parent / SIDE_FOLDER, images.files)
    data = page.encode("utf-8", "replace")  # the page's texts are printable already; this is the last guard
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".report-", suffix=".html")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.chmod(temporary, REPORT_MODE)  # mkstemp's 0600 would hide the page from anyone else
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _write_side_files(folder: Path, files: Mapping[str, bytes | Path]) -> None:
    """Replace ``folder`` with one holding ``files`` (none: no folder), so no picture of an earlier
    report is left behind. A file kept with a card is linked, not copied (copied where it cannot be:
    another file system)."""
    for leftover in folder.parent.glob(f"{STAGING_PREFIX}*"):  # a killed run's; the run folder is ours alone
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
    fresh = Path(tempfile.mkdtemp(dir=folder.parent, prefix=STAGING_PREFIX))
    try:
        for name, content in files.items():
            if isinstance(content, bytes):
                (fresh / name).write_bytes(content)
                continue
            try:
                os.link(content, fresh / name)
            except OSError:
                shutil.copyfile(content, fresh / name)
        if folder.is_dir():
            shutil.rmtree(folder)
        if files:
            fresh.chmod(0o755)  # mkdtemp's 0700 would hide the pictures from a web server of the run folder
            fresh.rename(folder)
    finally:
        if fresh.exists():
            shutil.rmtree(fresh)
