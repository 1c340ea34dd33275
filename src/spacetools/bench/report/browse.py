"""The sample list's controls: filter by benchmark and outcome, sort failures first.

Plain JavaScript inside the page (``templates/report_browse.js``: no library, works from ``file://``).
The state lives in the URL's fragment (``report.html#family=boppose&outcome=fail&order=failures``), so
a view can be linked. Each card carries what the controls read: its family, outcome, score and place.
"""

from __future__ import annotations

from collections.abc import Mapping

from spacetools.rewards.benchmarks import passed

#: A sample's outcome: the policy or the scorer failed (``error``), its headline figure is under the
#: pass mark (``fail``: what the headline counts as wrong), or not.
OUTCOMES = ("error", "fail", "pass")


def outcome(row: Mapping[str, object]) -> str:
    """``error``, ``fail`` or ``pass`` by the sample's headline figure (``rewards.benchmarks.passed``)."""
    trajectory = row["trajectory"]
    if isinstance(trajectory, Mapping) and trajectory.get("error"):
        return "error"
    score = row["score"]
    return "pass" if isinstance(score, Mapping) and passed(str(row["data_source"]), score) else "fail"
