"""The report at scale (issue 22, item 4): compressed pictures with full-size side files, a size bound
for 1,000 samples, filter and sort controls, and the page as headless Chromium renders it (where
`chromium` is installed)."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from report_rows import synthesized_rows
from spacetools.bench.dataset import Sample
from spacetools.bench.evaluate import load_samples
from spacetools.bench.report import write_report
from spacetools.bench.report.browse import outcome
from spacetools.bench.spatialsim import generator
from spacetools.bench.summary import short_name, summarize
from spacetools.kit import imagecodec

#: The stated bound: report.html of a 1,000-sample run (the full-size pictures are side files).
MAX_BYTES_PER_1000_SAMPLES = 12_000_000
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Sample]:
    """Two real SpatialSim questions of every family."""
    folder = tmp_path_factory.mktemp("spatialsim")
    generator.export(folder, n=2, seed=11)
    return load_samples(folder)


def report_for(folder: Path, samples: dict[str, Sample], count: int) -> tuple[Path, list[dict]]:
    rows, by_id = synthesized_rows(samples, count)
    summary = summarize(rows, policy="scripted", profile="realistic", data="d", resamples=200)
    return write_report(folder / "report.html", summary, rows, by_id), rows


class Cards(HTMLParser):
    """The sample cards of a page in document order (their attributes), and the text of #shown."""

    def __init__(self) -> None:
        super().__init__()
        self.cards: list[dict[str, str | None]] = []
        self.shown = ""
        self._in_shown = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "details" and ("class", "sample") in attrs:
            self.cards.append(dict(attrs))
        self._in_shown = ("id", "shown") in attrs

    def handle_data(self, data: str) -> None:
        if self._in_shown:
            self.shown += data

    def handle_endtag(self, tag: str) -> None:
        self._in_shown = False


def parse(page: str) -> Cards:
    cards = Cards()
    cards.feed(page)
    return cards


@pytest.mark.slow
def test_a_1000_sample_report_stays_under_its_bound_with_full_size_pictures_beside_it(
    samples: dict[str, Sample], tmp_path: Path
) -> None:
    path, rows = report_for(tmp_path, samples, 1000)
    size = path.stat().st_size
    assert size < MAX_BYTES_PER_1000_SAMPLES, f"{size / 1e6:.1f} MB"
    page = path.read_text()
    assert "data:image/png" not in page  # every inline picture is a compressed thumbnail
    assert len(parse(page).cards) == 1000  # every sample has its card: none is cut to keep it small
    side_files = [p.name for p in (tmp_path / "report_files").iterdir()]
    tool_files = [name for name in side_files if "-tool-" in name]
    assert len(side_files) - len(tool_files) == 1000 and len(tool_files) == 2000  # two tool pictures a row
    first = rows[0]["id"].replace("/", "-")
    assert f"href='report_files/{first}.jpg'" in page and f"href='report_files/{first}-tool-0.jpg'" in page
    # The tool's picture is kept as samples.jsonl stored it; the page has a smaller thumbnail.
    stored = (tmp_path / "report_files" / f"{first}-tool-0.jpg").read_bytes()
    assert stored == imagecodec.image_bytes(rows[0]["tool_images"][0])
    first += ".jpg"
    full = Image.open(tmp_path / "report_files" / first)
    height, width = samples[next(iter(samples))].images[0].shape[:2]
    assert full.width == width and full.height >= height  # the scene's own size (and a verdict strip)


def test_cards_carry_family_outcome_and_score_for_the_controls(
    samples: dict[str, Sample], tmp_path: Path
) -> None:
    path, rows = report_for(tmp_path, samples, 60)
    page = path.read_text()
    for control in ("<select id='family'>", "<select id='outcome'>", "<select id='order'>"):
        assert control in page
    families = {short_name(key) for key in {row["data_source"] for row in rows}}
    assert all(f"<option value='{family}'>" in page for family in families)
    cards = parse(page).cards
    assert [(c["data-family"], c["data-outcome"]) for c in cards] == [
        (short_name(row["data_source"]), outcome(row))
        for row in sorted(rows, key=lambda r: cards_order(r, rows))
    ]
    assert {c["data-outcome"] for c in cards} == {"pass", "fail", "error"}
    # A rewrite leaves no picture of the earlier report behind.
    report_for(tmp_path, samples, 20)
    assert len(list((tmp_path / "report_files").iterdir())) == 20 * 3  # each picture and two tools'


def cards_order(row: dict, rows: list[dict]) -> tuple[int, int]:
    """The page's default order: benchmarks in first-seen order, then the rows' own order."""
    benchmarks = list(dict.fromkeys(r["data_source"] for r in rows))
    return benchmarks.index(row["data_source"]), rows.index(row)


def chromium(*arguments: str) -> str:
    assert CHROMIUM is not None
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *arguments],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@needs_chromium
def test_chromium_runs_the_filter_and_failures_first_order(
    samples: dict[str, Sample], tmp_path: Path
) -> None:
    path, rows = report_for(tmp_path, samples, 90)
    family = short_name(rows[1]["data_source"])
    dom = chromium("--dump-dom", f"{path.as_uri()}#family={family}&outcome=fail&order=failures")
    parsed = parse(dom)
    visible = [card for card in parsed.cards if "hidden" not in card]
    expected = [row for row in rows if short_name(row["data_source"]) == family and outcome(row) == "fail"]
    assert expected and len(visible) == len(expected)
    assert {card["data-family"] for card in visible} == {family}
    assert {card["data-outcome"] for card in visible} == {"fail"}
    # Failures first: all cards are reordered by outcome, then score.
    ranks = [("error", "fail", "pass").index(str(card["data-outcome"])) for card in parsed.cards]
    assert ranks == sorted(ranks)
    assert parsed.shown == f"{len(expected)} of 90 samples shown"


@needs_chromium
def test_chromium_draws_the_page(samples: dict[str, Sample], tmp_path: Path) -> None:
    path, _ = report_for(tmp_path, samples, 30)
    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,1600", path.as_uri())
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    assert len(np.unique(pixels, axis=0)) > 200  # text, tables and plots, not a blank page
    # The plot's score bars (#60a5fa) and the pass badges (#16a34a) are on screen.
    for colour in ((0x60, 0xA5, 0xFA), (0x16, 0xA3, 0x4A)):
        assert (np.abs(pixels - colour).max(axis=1) < 8).sum() > 100, colour
