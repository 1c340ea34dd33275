"""The sample list's controls: filter by benchmark and outcome, sort failures first.

Plain JavaScript inside the page (no library, works from ``file://``). The state lives in the URL's
fragment (``report.html#family=boppose&outcome=fail&order=failures``), so a view can be linked.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

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


def _select(name: str, label: str, options: Sequence[tuple[str, str]]) -> str:
    choices = "".join(
        f"<option value='{html.escape(value)}'>{html.escape(text)}</option>" for value, text in options
    )
    return f"<label>{label} <select id='{name}'>{choices}</select></label>"


def controls_html(families: Sequence[str], counts: Mapping[str, int]) -> str:
    """The filter and sort controls above the sample list (``counts``: samples per outcome)."""
    outcome_options = [("", "all")] + [(name, f"{name} ({counts.get(name, 0)})") for name in OUTCOMES]
    return (
        "<div id='controls'>"
        + _select("family", "Benchmark", [("", "all"), *((family, family) for family in families)])
        + _select("outcome", "Outcome", outcome_options)
        + _select("order", "Order", [("data", "data order"), ("failures", "failures first")])
        + "<span id='shown' class='muted'></span></div>"
    )


SCRIPT = """
(() => {
  const list = document.getElementById('samples');
  const cards = Array.from(list.querySelectorAll('details.sample'));
  const controls = {family: document.getElementById('family'), outcome: document.getElementById('outcome'),
                    order: document.getElementById('order')};
  const rank = {error: 0, fail: 1, pass: 2};
  const byData = (a, b) => a.dataset.order - b.dataset.order;
  const failuresFirst = (a, b) => rank[a.dataset.outcome] - rank[b.dataset.outcome]
    || a.dataset.score - b.dataset.score || byData(a, b);
  function apply() {
    const family = controls.family.value, outcome = controls.outcome.value;
    const sorted = cards.slice().sort(controls.order.value === 'failures' ? failuresFirst : byData);
    const fragment = document.createDocumentFragment();
    let count = 0;
    for (const card of sorted) {
      const visible = (!family || card.dataset.family === family) && (!outcome || card.dataset.outcome === outcome);
      card.hidden = !visible;
      count += visible;
      fragment.appendChild(card);
    }
    list.appendChild(fragment);
    list.dataset.shown = count;
    document.getElementById('shown').textContent = count + ' of ' + cards.length + ' samples shown';
    const state = new URLSearchParams();
    for (const [key, element] of Object.entries(controls)) {
      if (element.value && !(key === 'order' && element.value === 'data')) state.set(key, element.value);
    }
    try { history.replaceState(null, '', '#' + state.toString()); } catch (error) { /* a sandboxed page */ }
  }
  const initial = new URLSearchParams(location.hash.slice(1));
  for (const [key, element] of Object.entries(controls)) {
    const wanted = initial.get(key);
    if (wanted !== null && Array.from(element.options).some((option) => option.value === wanted)) {
      element.value = wanted;
    }
    element.addEventListener('change', apply);
  }
  apply();
})();
"""
