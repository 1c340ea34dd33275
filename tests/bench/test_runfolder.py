"""Run-folder files: torn last lines repaired, rows written whole, any text survives."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spacetools.bench.runfolder import RunFolder, SamplesWriter, json_line, read_rows, repair_samples

ROWS = [{"id": f"b/{i}", "question": "Is it \ud800 or \u00e9?", "score": {"score": 1.0}} for i in range(3)]


def _write(path: Path, rows: list[dict]) -> bytes:
    with SamplesWriter(path) as writer:
        for row in rows:
            writer.append(row)
    return path.read_bytes()


def test_rows_are_ascii_lines_that_keep_any_text(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    data = _write(path, ROWS)
    assert data.isascii() and data.count(b"\n") == 3
    assert read_rows(path) == ROWS  # the lone surrogate comes back as it went in
    assert repair_samples(path) is None


@pytest.mark.parametrize("cut", [1, 17, -2])
def test_a_torn_last_line_is_dropped_and_the_next_append_is_whole(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "samples.jsonl"
    whole = _write(path, ROWS[:2])
    torn = json_line(ROWS[2])[:cut]
    path.write_bytes(whole + torn)
    message = repair_samples(path)
    assert message is not None and f"dropped a torn last line ({len(torn)} bytes)" in message
    assert path.read_bytes() == whole
    _write(path, ROWS[2:])
    assert read_rows(path) == ROWS


def test_a_row_without_its_line_end_gets_it_back(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_bytes(json_line(ROWS[0]) + json_line(ROWS[1])[:-1])
    assert "added it" in (repair_samples(path) or "")
    assert read_rows(path) == ROWS[:2]


def test_a_fragment_alone_leaves_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b'{"id": "b/0", "sco')
    assert repair_samples(path) is not None and path.read_bytes() == b""


def test_a_bad_line_in_the_middle_is_named(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_bytes(json_line(ROWS[0]) + b"{oops\n" + json_line(ROWS[1]))
    with pytest.raises(ValueError, match=r"samples\.jsonl:2 is not valid JSON"):
        read_rows(path)


def test_a_short_write_is_cut_back_off(tmp_path: Path) -> None:
    """A file size limit (as a full disk would) stops a row midway: nothing of it stays in the file."""
    path = tmp_path / "samples.jsonl"
    whole = _write(path, ROWS[:1])
    script = textwrap.dedent(
        f"""
        import resource, signal
        from spacetools.bench.runfolder import SamplesWriter
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG / a short write instead of dying
        resource.setrlimit(resource.RLIMIT_FSIZE, ({len(whole) + 20}, resource.RLIM_INFINITY))
        with SamplesWriter({str(path)!r}) as writer:
            try:
                writer.append({{"id": "b/1", "question": "x" * 500}})
            except OSError as error:
                print("refused:", error)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout
    assert path.read_bytes() == whole
    assert json.loads(whole) == json.loads(json_line(ROWS[0]))


def test_a_run_folder_records_its_run_and_keeps_its_rows(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    assert folder.recorded_run() is None and folder.rows() == [] and folder.done() == set()
    folder.record_run({"policy": "scripted", "limit": 3})
    assert folder.recorded_run() == {"policy": "scripted", "limit": 3}
    with folder.writer() as writer:
        for row in [*ROWS, ROWS[0]]:  # a sample written twice counts once
            writer.append(row)
    assert folder.rows() == ROWS and folder.done() == {"b/0", "b/1", "b/2"}
    folder.forget_samples()
    assert folder.rows() == [] and folder.recorded_run() is not None
    folder.run_file.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="not a JSON object"):
        folder.recorded_run()
