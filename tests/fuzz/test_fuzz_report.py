"""Whatever a model or a tool wrote, the report page renders and encodes as UTF-8 (issue 9, item 6)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from spacetools.agent.types import ToolCallRecord, Trajectory
from spacetools.bench.dataset import Sample
from spacetools.bench.report import render_report
from spacetools.bench.summary import summarize
from spacetools.kit.definition import GEOMETRY_KINDS
from spacetools.rewards import compute_score
from spacetools.rewards.formats import format_corners

from .corpus import TRIED
from .strategies import ANY_CHARACTER, ANY_FLOAT, JSON_VALUES, MODEL_TEXT

IMAGE = np.full((24, 32, 3), 90, dtype=np.uint8)
GRASP = (
    "Grasp center: [0.5, 0.5], Left finger base: [0.4, 0.5], Right finger base: [0.6, 0.5], "
    "Left finger tip: [0.4, 0.6], Right finger tip: [0.6, 0.6]"
)
SOURCES = {
    "spatialsim_boppose": format_corners([(0.1, 0.1), (0.2, 0.1), (0.2, 0.2), (0.1, 0.2)] * 2),
    "robospatial": "Yes",
    "spatialsim_bopgrasp": GRASP,
    "spatialsim_detect2d": "[[0.1, 0.1, 0.4, 0.4]]",
}
# Structured tool results as tools give them, with any numbers in them, and geometry declarations of
# any kind (or none) for their keys.
VALUE_KEYS = ["points", "corners_2d", "points_2d"]
GEOMETRY_VALUES = st.dictionaries(
    st.sampled_from(VALUE_KEYS), st.lists(st.lists(ANY_FLOAT, min_size=2, max_size=2), max_size=9)
)
DECLARATIONS = st.one_of(
    st.dictionaries(st.sampled_from(VALUE_KEYS), st.sampled_from([*GEOMETRY_KINDS, "volume"])), JSON_VALUES
)


@given(
    answer=MODEL_TEXT,
    result=st.text(ANY_CHARACTER, max_size=200),
    arguments=st.dictionaries(st.text(ANY_CHARACTER, max_size=5), JSON_VALUES, max_size=3),
    value=st.one_of(JSON_VALUES, GEOMETRY_VALUES),
    geometry=DECLARATIONS,
    data_source=st.sampled_from(sorted(SOURCES)),
    tool=st.text(ANY_CHARACTER, max_size=20),
)
def test_any_text_renders_a_whole_page(
    answer: str, result: str, arguments: dict, value: object, geometry: object, data_source: str, tool: str
) -> None:
    TRIED["report"] += 1
    truth = SOURCES[data_source]
    call = ToolCallRecord(tool, arguments, result, False, [], 0.01, 1)
    trajectory = Trajectory(
        task_id="t", data_source=data_source, messages=[{"role": "assistant", "content": answer}],
        tool_calls=[call], answer=None, turns=1, score=None, parse_errors=0, stats={}, wall_s=0.1,
    ).to_dict()  # fmt: skip
    trajectory["tool_calls"][0].update(value=value, geometry=geometry)
    row = {
        "id": "t", "data_source": data_source, "question": result, "trajectory": trajectory,
        "score": compute_score(data_source, answer, truth),
    }  # fmt: skip
    sample = Sample(data_source=data_source, prompt=[], images=[IMAGE], ground_truth=truth, extra_info={})
    page = render_report(summarize([row], policy=answer[:5], profile="exact", data="d"), [row], {"t": sample})
    assert page.endswith("</html>")
    page.encode("utf-8")
