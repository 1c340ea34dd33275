"""``report.html``: one self-contained page per evaluation run.

The page has the summary table, the tool usage per benchmark and, per sample, the image annotated
with the predicted (red) and true (green) geometry (points, mask outline, box corners with edges,
grasp lines, 2D boxes; a yes/no or multiple-choice answer is written under the image against the
truth) plus the points the pointing tools reported (blue), the question, the answer, the score and
the tool chain: each call, its arguments, the result text, the error flag and the picture the tool
returned (a fitted 3D box, which returns none, is drawn from its corners). A plots section shows each
benchmark's score with its 95% interval, tool calls and failures; the samples can be filtered by
benchmark and outcome and sorted failures first. Pictures are embedded as WebP thumbnails (the page
alone can be mailed); each sample's picture at full size is a JPEG in ``report_files/`` beside it.

The tools' geometry is drawn from each call's structured ``value``, under the keys its tool method
declared (``@tool_method(geometry=…)``). The HTML comes from the Jinja2 templates ``report*.html`` in
``bench/templates/``. Modules: :mod:`~spacetools.bench.report.cards` (a sample's card, built as its
episode ends and kept in the run folder), :mod:`~spacetools.bench.report.drawing` (a sample's picture),
:mod:`~spacetools.bench.report.toolchain` (the calls), :mod:`~spacetools.bench.report.images`
(thumbnails and side files), :mod:`~spacetools.bench.report.plots`,
:mod:`~spacetools.bench.report.browse` (filter and sort) and :mod:`~spacetools.bench.report.page`.
"""

from spacetools.bench.report.cards import CARDS_FOLDER, BuiltCard, CardBuilder, build_card
from spacetools.bench.report.drawing import (
    PREDICTED,
    TOOL_POINT,
    TRUTH,
    annotate,
    answer_kind,
    focus_region,
)
from spacetools.bench.report.images import SIDE_FOLDER, ReportImages, webp_data_url
from spacetools.bench.report.page import render_report, write_report
from spacetools.bench.report.toolchain import tool_geometry_picture

__all__ = [
    "CARDS_FOLDER",
    "PREDICTED",
    "SIDE_FOLDER",
    "TOOL_POINT",
    "TRUTH",
    "BuiltCard",
    "CardBuilder",
    "ReportImages",
    "annotate",
    "answer_kind",
    "build_card",
    "focus_region",
    "render_report",
    "tool_geometry_picture",
    "webp_data_url",
    "write_report",
]
