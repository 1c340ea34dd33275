"""The scripted teacher's thoughts, read from `spacetools train traces` output for every family: no slot
left empty (a name, a number or a phrase the template should have filled)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from spacetools.agent.protocol import parse_turn
from spacetools.bench.spatialsim import FAMILIES
from spacetools.cli.main import app

runner = CliRunner()

# Traces of an empty slot: two spaces (an empty name between words), empty quotes or brackets, a word
# the template took from a missing value, a dangling article before a preposition or punctuation.
EMPTY_SLOT = re.compile(
    r"\S  \S|''|\"\"|\(\)|\[\]|\bNone\b|\bnan\b|\bthe (?:in|at|and|of|to)\b|\bthe [.,;:]|\s[.,;:]"
)


def _thoughts(traces: Path) -> dict[str, list[str]]:
    by_family: dict[str, list[str]] = {}
    for line in traces.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for message in row["messages"]:
            if message["role"] == "assistant":
                thought = parse_turn(message["content"]).think
                by_family.setdefault(row["family"], []).append(thought or "")
    return by_family


def test_every_familys_teacher_thoughts_fill_their_slots(tmp_path: Path) -> None:
    data, traces = tmp_path / "data", tmp_path / "traces.jsonl"
    generated = runner.invoke(
        app, ["data", "generate", "--out", str(data), "--n", "1", "--seed", "3", "--workers", "1"]
    )
    assert generated.exit_code == 0, generated.output
    made = runner.invoke(app, ["train", "traces", "--data", str(data), "--out", str(traces)])
    assert made.exit_code == 0, made.output
    assert f"episodes: {len(FAMILIES)}/{len(FAMILIES)} (100%)" in made.output  # the progress, piped

    by_family = _thoughts(traces)
    assert set(by_family) == set(FAMILIES), made.output
    empty = {
        family: [t for t in thoughts if not t.strip() or EMPTY_SLOT.search(t)]
        for family, thoughts in by_family.items()
    }
    assert not any(empty.values()), {family: found for family, found in empty.items() if found}
