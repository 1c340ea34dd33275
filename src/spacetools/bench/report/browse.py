"""The sample list's controls: filter by benchmark and outcome, sort failures first.

Plain JavaScript inside the page (``templates/report_browse.js``: no library, works from ``file://``).
The state lives in the URL's fragment (``report.html#family=boppose&outcome=fail&order=failures``), so
a view can be linked. Each card carries what the controls read: its family, outcome, score and place.
"""

from __future__ import annotations

from collections.abc import Mapping

#: A sample's outcome: the policy or the scorer failed (``error``), it scored under the pass mark, or not.
OUTCOMES = ("error", "fail", "pass")
PASS_SCORE = 0.5


def outcome(row: Mapping[str, object]) -> str:
    """``error``, ``fail`` or ``pass`` (a score of at least :data:`PASS_SCORE`)."""
    trajectory = row["trajectory"]
    if isinstance(trajectory, Mapping) and trajectory.get("error"):
        return "error"
    score = row["score"]
    value = float(score.get("score", 0.0)) if isinstance(score, Mapping) else 0.0
    return "pass" if value >= PASS_SCORE else "fail"
