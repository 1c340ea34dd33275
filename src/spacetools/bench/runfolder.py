"""A run folder's files, written so that a kill, a full disk or any model text never bricks the folder.

- ``run.json``: the :class:`~spacetools.bench.evaluate.EvalConfig` the run was made with.
- ``samples.jsonl``: one row per finished sample. Each row is one ASCII JSON line (lone surrogates and
  any other text survive as ``\\u`` escapes) appended with a single ``write`` and flushed; a short write
  (a full disk) is cut back off, so no later row lands on a fragment. A fragment left by a kill mid-write
  is dropped by :func:`repair_samples` when the run resumes, and its sample runs again.
- ``summary.json``, ``report.html``: rebuilt from all rows at the end of every run.
- ``report_cards/``: each row's report card, built as its episode ends and kept for the next report
  (:mod:`spacetools.bench.report.cards`).

:class:`RunFolder` holds a folder's bookkeeping: where each file lives, the run it records, its rows and
their writer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
RUN_FILE = "run.json"


@dataclass(frozen=True)
class RunFolder:
    """One run folder: its files, the run ``run.json`` records, the rows of ``samples.jsonl``."""

    path: Path

    @property
    def samples_file(self) -> Path:
        return self.path / SAMPLES_FILE

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def report_file(self) -> Path:
        return self.path / REPORT_FILE

    def recorded_run(self) -> dict[str, Any] | None:
        """What ``run.json`` records (None: no run yet); a `ValueError` when it cannot be read as one."""
        if not self.run_file.is_file():
            return None
        record = json.loads(self.run_file.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        return record

    def record_run(self, record: dict[str, Any]) -> None:
        """Write ``run.json``."""
        self.run_file.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    def repair(self) -> str | None:
        """Make ``samples.jsonl`` whole for a resumed run (see :func:`repair_samples`)."""
        return repair_samples(self.samples_file)

    def forget_samples(self) -> None:
        """Delete ``samples.jsonl``: the run starts afresh."""
        self.samples_file.unlink(missing_ok=True)

    def rows(self) -> list[dict[str, Any]]:
        """The rows written so far, the first of each sample id."""
        return unique_rows(read_rows(self.samples_file))

    def done(self) -> set[Any]:
        """The sample ids with a row."""
        return {row.get("id") for row in read_rows(self.samples_file)}

    def writer(self) -> SamplesWriter:
        """The writer that appends rows to ``samples.jsonl`` (a context manager)."""
        return SamplesWriter(self.samples_file)


def json_line(record: Any) -> bytes:
    """``record`` as one ASCII JSON line: no text (control characters, lone surrogates) can break it."""
    return (json.dumps(record, ensure_ascii=True) + "\n").encode("ascii")


class SamplesWriter:
    """Appends whole rows to ``samples.jsonl``: one ``write`` per row, a short write cut back off."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def __enter__(self) -> SamplesWriter:
        # Never through a symlink: appending would write into whatever it points at.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def append(self, row: dict[str, Any]) -> None:
        """Write ``row`` as one line, or nothing (``OSError``) when the disk takes only part of it."""
        if self._fd is None:
            raise RuntimeError("SamplesWriter.append outside its with block")
        data = json_line(row)
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            written = os.write(self._fd, data)
        except OSError:
            os.ftruncate(self._fd, end)
            raise
        if written != len(data):
            os.ftruncate(self._fd, end)
            raise OSError(
                f"{self.path}: only {written} of {len(data)} bytes of a row were written (disk full?)"
            )


def repair_samples(path: str | Path) -> str | None:
    """Drop a torn last line of ``samples.jsonl`` (a run killed or out of disk mid-write); a line that
    parses but lost its newline gets it back. Returns what was done, or None when the file was whole.

    A bad line anywhere but at the end is not a torn write; :func:`read_rows` reports it.
    """
    path = Path(path)
    if not path.is_file():
        return None
    data = path.read_bytes()
    if not data or (data.endswith(b"\n") and _is_row(data.rstrip(b"\n").rpartition(b"\n")[2])):
        return None
    head, _, last = data.rstrip(b"\n").rpartition(b"\n")
    kept = len(head) + 1 if head else 0
    if _is_row(last):
        with path.open("ab") as stream:
            stream.write(b"\n")
        return f"{path}: the last row had no line end; added it"
    with path.open("r+b") as stream:
        stream.truncate(kept)
    return f"{path}: dropped a torn last line ({len(data) - kept} bytes); its sample runs again"


def _is_row(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return False


def unique_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first row of each sample id (a folder that two runs once wrote into holds some twice)."""
    seen: set[Any] = set()
    kept = []
    for row in rows:
        key = row.get("id")
        if key is None or key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``samples.jsonl``; a torn last line (a run killed mid-write) is ignored."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    lines = path.read_bytes().splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number} is not valid JSON: {error}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number} is not a row (a JSON object)")
        rows.append(row)
    return rows
