"""Report cards built beside the episodes (bench/report/cards.py): the page they stitch is the page
drawn in one go, and a resumed run reuses the cards it kept, building again only those whose row
changed, that are torn, or that a dead worker never wrote."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from report_rows import synthesized_rows
from spacetools.bench.dataset import Sample, load_samples
from spacetools.bench.report import CARDS_FOLDER, CardBuilder, write_report
from spacetools.bench.report.cards import BuiltCard, card_path
from spacetools.bench.runfolder import json_line
from spacetools.bench.spatialsim import generator
from spacetools.bench.summary import summarize


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Sample]:
    """One real SpatialSim question of every family."""
    folder = tmp_path_factory.mktemp("spatialsim")
    generator.export(folder, n=1, seed=11)
    return load_samples(folder)


def run_rows(samples: dict[str, Sample], count: int) -> tuple[list[dict[str, Any]], dict[str, Sample]]:
    """Rows as an evaluation reads them back from samples.jsonl, and their samples by id."""
    rows, by_id = synthesized_rows(samples, count)
    return [json.loads(json_line(row)) for row in rows], by_id


def written_report(
    folder: Path,
    rows: list[dict[str, Any]],
    by_id: dict[str, Sample],
    cards: dict[str, BuiltCard] | None = None,
) -> tuple[bytes, dict[str, bytes]]:
    """The page and its side files as ``write_report`` leaves them in ``folder``."""
    summary = summarize(rows, policy="scripted", profile="exact", data="d", resamples=50)
    page = write_report(folder / "report.html", summary, rows, by_id, cards=cards).read_bytes()
    return page, {path.name: path.read_bytes() for path in (folder / "report_files").iterdir()}


def test_cards_built_beside_the_episodes_stitch_the_page_drawn_in_one_go(
    samples: dict[str, Sample], tmp_path: Path
) -> None:
    rows, by_id = run_rows(samples, 12)
    # An id a file name cannot tell from the first one: the page still names its pictures apart.
    twin = {**rows[0], "id": str(rows[0]["id"]).replace("/", "-")}
    rows.append(twin)
    by_id[twin["id"]] = by_id[rows[0]["id"]]
    (tmp_path / "one_go").mkdir()
    expected = written_report(tmp_path / "one_go", rows, by_id)

    run = tmp_path / "run"
    with CardBuilder(run / CARDS_FOLDER, workers=2) as builder:
        for row in rows[:8]:  # as their episodes end; the others are built by finish, as after a resume
            builder.submit(row, by_id[row["id"]])
        cards = builder.finish(rows, by_id)
    assert sorted(cards) == sorted(str(row["id"]) for row in rows)
    page, files = written_report(run, rows, by_id, cards)
    assert files == expected[1] and len(files) == 3 * len(rows)  # each picture and two tools', named alike
    assert page == expected[0]


def test_a_resumed_run_reuses_its_cards_and_builds_again_the_changed_and_the_torn(
    samples: dict[str, Sample], tmp_path: Path
) -> None:
    rows, by_id = run_rows(samples, 4)
    folder = tmp_path / CARDS_FOLDER
    with CardBuilder(folder, workers=1) as builder:
        builder.finish(rows, by_id)
    paths = [card_path(folder, str(row["id"])) for row in rows]
    written = [path.stat().st_mtime_ns for path in paths]

    rows[1] = {**rows[1], "score": {"score": 0.0, "reason": "another run's row"}}
    paths[2].write_bytes(b'{"fingerprint": "a torn wri')
    with CardBuilder(folder, workers=1) as builder:
        cards = builder.finish(rows, by_id)

    assert [path.stat().st_mtime_ns == stamp for path, stamp in zip(paths, written, strict=True)] == [
        True,
        False,
        False,
        True,
    ]
    assert cards[str(rows[1]["id"])].card.score == 0.0 and cards[str(rows[1]["id"])].card.outcome == "fail"
    assert len(cards) == 4


def test_a_card_worker_that_dies_costs_no_card(samples: dict[str, Sample], tmp_path: Path) -> None:
    rows, by_id = run_rows(samples, 6)
    with CardBuilder(tmp_path / CARDS_FOLDER, workers=2) as builder:
        builder.submit(rows[0], by_id[rows[0]["id"]])
        for worker in multiprocessing.active_children():
            os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
        for row in rows[1:]:
            builder.submit(row, by_id[row["id"]])
        cards = builder.finish(rows, by_id)
    assert sorted(cards) == sorted(str(row["id"]) for row in rows)


def test_kept_pictures_are_files_beside_their_card_that_the_page_links(
    samples: dict[str, Sample], tmp_path: Path
) -> None:
    rows, by_id = run_rows(samples, 3)
    folder = tmp_path / CARDS_FOLDER
    with CardBuilder(folder, workers=1) as builder:
        cards = builder.finish(rows, by_id)
    side_files = [side.content for built in cards.values() for side in built.files]
    assert len(side_files) == 9 and all(
        isinstance(side, Path) and side.parent == folder for side in side_files
    )
    records = [json.loads(path.read_bytes()) for path in folder.glob("*.json")]
    assert all(
        set(side) == {"name", "suffix", "url", "bytes"} for record in records for side in record["files"]
    )

    written_report(tmp_path, rows, by_id, cards)
    linked = {path.stat().st_ino for path in (tmp_path / "report_files").iterdir()}
    assert linked == {side.stat().st_ino for side in side_files}  # linked, not copied
    assert all(side.stat().st_mode & 0o044 == 0o044 for side in side_files)  # readable by a web server


def test_a_card_that_lost_a_picture_is_built_again_and_a_rebuilt_one_drops_its_old_pictures(
    samples: dict[str, Sample], tmp_path: Path
) -> None:
    rows, by_id = run_rows(samples, 2)
    folder = tmp_path / CARDS_FOLDER
    with CardBuilder(folder, workers=1) as builder:
        first = builder.finish(rows, by_id)
    lost = first[str(rows[0]["id"])].files[0].content
    assert isinstance(lost, Path)
    lost.unlink()
    stale = card_path(folder, str(rows[1]["id"])).with_suffix(".side7.jpg")
    stale.write_bytes(b"a picture of a card kept before")
    rows[1] = {**rows[1], "score": {"score": 0.0, "reason": "another run's row"}}
    with CardBuilder(folder, workers=1) as builder:
        again = builder.finish(rows, by_id)
    assert lost.exists() and all(isinstance(side.content, Path) for side in again[str(rows[0]["id"])].files)
    assert not stale.exists()
