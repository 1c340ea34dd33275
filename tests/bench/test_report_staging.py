"""The report's side files are swapped in from a hidden staging folder; one that a killed run left is
removed by the next report, and nothing else beside it is touched."""

from __future__ import annotations

from pathlib import Path

from spacetools.bench.report.page import STAGING_PREFIX, _write_side_files


def test_a_killed_reports_staging_folder_goes_and_nothing_else(tmp_path: Path) -> None:
    leftover = tmp_path / f"{STAGING_PREFIX}killed"
    leftover.mkdir()
    (leftover / "big.png").write_bytes(b"x" * 1000)
    (tmp_path / ".report-notes").mkdir()
    (tmp_path / "precious.txt").write_text("mine")
    _write_side_files(tmp_path / "report_files", {"a.png": b"png"})
    assert not leftover.exists()
    assert (tmp_path / "report_files" / "a.png").read_bytes() == b"png"
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        ".report-notes",
        "precious.txt",
        "report_files",
    ]
