"""``report.html``: one self-contained page per evaluation run.

The page has the summary table, the tool usage per benchmark and, per sample, the image annotated
with the predicted (red) and true (green) geometry (points, mask outline, box corners with edges,
grasp lines, 2D boxes; a yes/no or multiple-choice answer is written under the image against the
truth) plus the points the pointing tools reported (blue), the question, the answer, the score and
the tool chain: each call, its arguments, the result text, the error flag and the picture the tool
returned (a fitted 3D box, which returns none, is drawn from its corners). Images are embedded as
base64, so the file can be mailed or archived as it is.

Modules: :mod:`~spacetools.bench.report.drawing` (a sample's picture),
:mod:`~spacetools.bench.report.toolchain` (the calls) and :mod:`~spacetools.bench.report.page` (the page).
"""

from spacetools.bench.report.drawing import (
    PREDICTED,
    TOOL_POINT,
    TRUTH,
    annotate,
    answer_kind,
    focus_region,
    png_data_url,
)
from spacetools.bench.report.page import render_report, write_report
from spacetools.bench.report.toolchain import tool_geometry_picture

__all__ = [
    "PREDICTED",
    "TOOL_POINT",
    "TRUTH",
    "annotate",
    "answer_kind",
    "focus_region",
    "png_data_url",
    "render_report",
    "tool_geometry_picture",
    "write_report",
]
