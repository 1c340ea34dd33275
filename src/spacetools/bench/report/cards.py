"""A sample's card in the report (``templates/report_sample.html``): its pictures, texts and tool chain,
built once per sample.

Building a card (drawing and encoding its pictures) is most of a report's work, ~50 ms a sample. An
evaluation builds each card as its episode ends, in a small process pool beside the episodes
(:class:`CardBuilder`), and keeps it in the run folder's ``report_cards/``; the page then only stitches
the kept cards (:func:`~spacetools.bench.report.page.write_report`), and a resumed run reuses them.

A kept card is one JSON file per sample, with its side files (full-size pictures) beside it. The JSON
holds the card, the side files in the order they were kept (so the page names them as if it had drawn
them itself; the page links them into its ``report_files/`` rather than copying them) and a fingerprint of
what it was built from (the row's JSON line, the sample's truth and picture, :data:`CARD_FORMAT`). A card
whose row or sample changed, that is missing or unreadable, or that lost a side file, is built again.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from threadpoolctl import threadpool_limits

from spacetools.agent.protocol import truncate_middle
from spacetools.agent.types import assistant_text
from spacetools.bench.dataset import Sample
from spacetools.bench.report.browse import outcome
from spacetools.bench.report.drawing import annotate, answer_kind, focus_region, one_line
from spacetools.bench.report.images import ReportImages, SideFile, file_stem
from spacetools.bench.report.toolchain import ChainRow, Picture, tool_chain, tool_points
from spacetools.bench.runfolder import json_line
from spacetools.bench.summary import short_name
from spacetools.kit.mainscript import main_script_hidden
from spacetools.rewards.benchmarks import headline_value
from spacetools.rewards.extraction import extract_answer

logger = logging.getLogger(__name__)

SUMMARY_QUESTION_CHARS = 110
ANSWER_CHARS = 400
#: Where an evaluation keeps its cards, beside ``report.html``.
CARDS_FOLDER = "report_cards"
#: Part of every card's fingerprint: raise it when what a card holds or how it is drawn changes, so
#: that cards kept by an earlier version are built again.
CARD_FORMAT = 2
#: At most this many processes build cards (each holds its own imports, ~150 MB).
MAX_CARD_WORKERS = 4
PR_SET_PDEATHSIG = 1
FINGERPRINT_STRIDE = 8


@dataclass(frozen=True)
class SamplePictures:
    """A sample's annotated picture: its thumbnail, its full size's side file (None: none) and a zoom
    on the answer and the truth (None when they are not small)."""

    thumbnail: str
    full: str | None
    zoom: str | None


@dataclass(frozen=True)
class SampleCard:
    """What a sample's card shows (``templates/report_sample.html``)."""

    id: str
    family: str
    outcome: str
    score: float
    headline_name: str
    """The sample's headline figure (``acc``, ``iou``, ``mace``), by which it passes or fails."""
    headline: float
    question: str
    question_line: str
    answer: str
    truth: str
    details: str
    turns: int
    finish_reason: str
    wall_s: float
    error: str | None
    pictures: SamplePictures | None
    chain: list[ChainRow]


@dataclass(frozen=True)
class BuiltCard:
    """A card as built on its own: its side files' links point at :attr:`files`, which the page keeps
    under its own names (:func:`placed`)."""

    card: SampleCard
    files: list[SideFile]


def _answer_text(trajectory: Mapping[str, Any]) -> str:
    """The episode's final answer, read as the scorer reads it."""
    return extract_answer(assistant_text(trajectory["messages"])).text


def _pictures(row: Mapping[str, Any], sample: Sample, answer: str, images: ReportImages) -> SamplePictures:
    """The annotated picture (a click opens it at full size) and, when the answer is small, a zoom."""
    kind = answer_kind(sample.data_source, sample.ground_truth)
    pointed = tool_points(row["trajectory"])
    image = sample.images[0]
    full = None
    if images.side_files:
        drawn = annotate(image, kind, answer, sample.ground_truth, pointed, width=image.shape[1])
        full = images.side_file(str(row["id"]), drawn)
    region = focus_region(kind, answer, sample.ground_truth)
    zoom = None
    if region is not None:
        zoom = images.thumbnail(annotate(image, kind, answer, sample.ground_truth, pointed, region=region))
    thumbnail = images.thumbnail(annotate(image, kind, answer, sample.ground_truth, pointed))
    return SamplePictures(thumbnail, full, zoom)


def build_card(row: Mapping[str, Any], sample: Sample | None, *, side_files: bool = True) -> BuiltCard:
    """The card of a ``samples.jsonl`` row (``sample``: its question, for the picture and the truth;
    None: a card of texts only). Without ``side_files`` the card has thumbnails only."""
    images = ReportImages(side_files=side_files)
    trajectory = row["trajectory"]
    score = row["score"]
    answer = _answer_text(trajectory)
    pictures, truth = None, ""
    if sample is not None:
        pictures = _pictures(row, sample, answer, images)
        kind = answer_kind(sample.data_source, sample.ground_truth)
        truth = (
            "(mask, drawn in green)" if kind == "mask" else truncate_middle(sample.ground_truth, ANSWER_CHARS)
        )
    headline_name, headline = headline_value(str(row["data_source"]), score)
    card = SampleCard(
        id=str(row["id"]),
        family=short_name(str(row["data_source"])),
        outcome=outcome(row),
        score=float(score.get("score", 0.0)),
        headline_name=headline_name,
        headline=headline,
        question=str(row["question"]),
        question_line=one_line(str(row["question"]), SUMMARY_QUESTION_CHARS),
        answer=truncate_middle(answer, ANSWER_CHARS),
        truth=truth,
        details=json.dumps({k: v for k, v in score.items() if k != "score"}),
        turns=int(trajectory["turns"]),
        finish_reason=str(trajectory.get("finish_reason", "?")),
        wall_s=float(trajectory["wall_s"]),
        error=trajectory.get("error") or None,
        pictures=pictures,
        chain=tool_chain(row, sample, images),
    )
    return BuiltCard(card, images.kept)


def placed(built: BuiltCard, images: ReportImages) -> SampleCard:
    """The card on the page: its side files kept in the page's ``images`` (named there, in the order
    the card kept them) and its links pointing at those names."""
    links = {file.url: images.keep(file.name, file.suffix, file.content) for file in built.files}
    card = built.card
    if not links:
        return card
    pictures = card.pictures
    if pictures is not None and pictures.full is not None:
        pictures = dataclasses.replace(pictures, full=links[pictures.full])
    chain = [
        dataclasses.replace(
            call,
            pictures=[
                dataclasses.replace(item, link=links[item.link]) if item.link else item
                for item in call.pictures
            ],
        )
        for call in card.chain
    ]
    return dataclasses.replace(card, pictures=pictures, chain=chain)


def fingerprint(row: Mapping[str, Any], sample: Sample | None) -> str:
    """What a card was built from, hashed: the row as ``samples.jsonl`` holds it, the sample's truth and
    picture (a grid of its pixels), and :data:`CARD_FORMAT`."""
    digest = hashlib.blake2b(json_line(row), digest_size=16)
    digest.update(f"\n{CARD_FORMAT}\n".encode())
    if sample is not None:
        digest.update(json.dumps([sample.data_source, sample.ground_truth]).encode())
        image = sample.images[0]
        digest.update(repr(image.shape).encode())
        # Every 8th row and column: another picture shows there, at 1/64 of the cost of hashing it all.
        digest.update(image[::FINGERPRINT_STRIDE, ::FINGERPRINT_STRIDE].tobytes())
    return digest.hexdigest()


def card_path(folder: Path, sample_id: str) -> Path:
    """The kept card of a sample: its id as a file name, with a hash of the id (two ids may differ only
    in characters a file name drops)."""
    return (
        folder
        / f"{file_stem(sample_id)}-{hashlib.blake2b(sample_id.encode(), digest_size=4).hexdigest()}.json"
    )


def _side_path(card: Path, index: int, suffix: str) -> Path:
    """The ``index``-th side file of the card kept in ``card``."""
    return card.with_name(f"{card.stem}.side{index}{suffix}")


def _write_whole(path: Path, content: bytes, mode: int = 0o600) -> None:
    """Write ``path`` whole or not at all (a killed run leaves no torn file)."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".card-", suffix=path.suffix)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(content)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def save_card(folder: Path, built: BuiltCard, made_from: str) -> None:
    """Keep ``built`` (its :func:`fingerprint` ``made_from``) in ``folder``: its side files first, then the
    JSON that names them, so a card that can be read has all of its files."""
    path = card_path(folder, built.card.id)
    rebuilt = path.exists()
    files, kept = [], set()
    for index, side in enumerate(built.files):
        side_path = _side_path(path, index, side.suffix)
        kept.add(side_path.name)
        content = side.content if isinstance(side.content, bytes) else side.content.read_bytes()
        _write_whole(side_path, content, mode=0o644)  # readable where the page links it, as its copies are
        files.append({"name": side.name, "suffix": side.suffix, "url": side.url, "bytes": len(content)})
    _write_whole(
        path, json_line({"fingerprint": made_from, "card": dataclasses.asdict(built.card), "files": files})
    )
    if rebuilt:  # the card it replaced may have kept more side files (a first build has none to drop)
        for stale in path.parent.glob(f"{path.stem}.side*"):  # the stem holds no glob characters
            if stale.name not in kept:
                stale.unlink(missing_ok=True)


def _card_from_record(record: Mapping[str, Any]) -> SampleCard:
    fields = dict(record)
    pictures = fields["pictures"]
    fields["pictures"] = SamplePictures(**pictures) if pictures is not None else None
    fields["chain"] = [
        ChainRow(**{**call, "pictures": [Picture(**item) for item in call["pictures"]]})
        for call in fields["chain"]
    ]
    return SampleCard(**fields)


def load_card(folder: Path, sample_id: str, made_from: str) -> BuiltCard | None:
    """The kept card of ``sample_id`` if its :func:`fingerprint` is ``made_from``; None otherwise."""
    try:
        path = card_path(folder, sample_id)
        record = json.loads(path.read_bytes())
        if record.get("fingerprint") != made_from:
            return None
        files = []
        for index, f in enumerate(record["files"]):
            side_path = _side_path(path, index, f["suffix"])
            if side_path.stat().st_size != f["bytes"]:
                return None
            files.append(SideFile(f["name"], f["suffix"], f["url"], side_path))
        return BuiltCard(_card_from_record(record["card"]), files)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing, torn by a disk full, or of another shape: built again


def _build_and_save(folder: Path, row: dict[str, Any], sample: Sample | None) -> None:
    """A card worker's task: build a row's card and keep it."""
    row = json.loads(json_line(row))  # the row exactly as the page will read it back from samples.jsonl
    save_card(folder, build_card(row, sample), fingerprint(row, sample))


def _worker_started() -> None:
    """A card worker dies with the evaluation (Linux), leaves Ctrl-C to it and runs one BLAS thread (the
    workers already spread over the cores)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threadpool_limits(1, user_api="blas")
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the evaluation died before the signal was asked for
            os._exit(1)


def _nothing() -> None:
    """A task that starts a worker."""


class CardBuilder:
    """Builds an evaluation's cards in worker processes as its episodes end, keeping them in ``folder``.

    The workers start with the builder (spawned with the main script hidden, before the episodes'
    tools start). :meth:`submit` hands over a row as it is written; :meth:`finish` waits for them,
    builds the cards the run lacks (rows of an earlier run, stale cards, cards lost with a worker that
    died: the episodes never wait for a card) and returns every row's card for the page.
    """

    def __init__(self, folder: Path, workers: int | None = None) -> None:
        self.folder = folder
        self.workers = workers or max(1, min(os.cpu_count() or 1, MAX_CARD_WORKERS))
        self._pool: ProcessPoolExecutor | None = None
        self._broken = False
        self._submitted: list[Future[None]] = []

    def _start_pool(self) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_started
        )
        # A spawned worker starts at a submit that finds none idle: start them all now, hidden.
        with main_script_hidden():
            self._submitted.extend(pool.submit(_nothing) for _ in range(self.workers))
        return pool

    def __enter__(self) -> CardBuilder:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._pool = self._start_pool()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=kind is None, cancel_futures=True)
            self._pool = None

    def submit(self, row: dict[str, Any], sample: Sample | None) -> None:
        """Build and keep ``row``'s card in a worker (at :meth:`finish` if the workers are gone)."""
        if self._pool is None:
            raise RuntimeError("CardBuilder.submit outside its with block")
        if self._broken:
            return
        try:
            self._submitted.append(self._pool.submit(_build_and_save, self.folder, row, sample))
        except BrokenProcessPool:
            self._broken = True

    def finish(self, rows: Sequence[dict[str, Any]], samples: Mapping[str, Sample]) -> dict[str, BuiltCard]:
        """Every row's card by sample id, once those handed over are built; a row without a kept card of
        its own (or whose card is stale) gets one built now, in the workers."""
        if self._pool is None:
            raise RuntimeError("CardBuilder.finish outside its with block")
        for future in self._submitted:
            try:
                future.result()  # a card that failed to build fails the report, as drawing it there would
            except BrokenProcessPool:
                self._broken = True
        self._submitted.clear()
        if self._broken:  # a worker died (killed, out of memory): the cards it held are built again
            logger.warning("a report card worker died; its cards are built again")
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool, self._broken = self._start_pool(), False
        prints = {str(row["id"]): fingerprint(row, samples.get(row["id"])) for row in rows}
        cards = {key: load_card(self.folder, key, made_from) for key, made_from in prints.items()}
        missing = [row for row in rows if cards[str(row["id"])] is None]
        pool = self._pool
        for future in [
            pool.submit(_build_and_save, self.folder, row, samples.get(row["id"])) for row in missing
        ]:
            future.result()
        for row in missing:
            key = str(row["id"])
            cards[key] = load_card(self.folder, key, prints[key])
        return {key: card for key, card in cards.items() if card is not None}
