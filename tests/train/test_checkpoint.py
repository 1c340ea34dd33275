"""Checkpoints are read as data only, and one that exists but cannot be read whole is refused in one line.

A finished `spacetools train sft` run folder is damaged the ways a disk, a kill or an attacker would
(a planted pickle, a deleted or cut-short file, a leftover of an interrupted swap) and resumed through the
CLI: each refusal is one `Error:` line naming the file and the way out, exit status 2, nothing run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.kit import imagecodec
from spacetools.kit.manifest import MANIFEST_FILE
from tiny_qwen import build_tiny_qwen25_vl

torch = pytest.importorskip("torch")

from spacetools.train.checkpoint import (  # noqa: E402
    MODEL_DIR,
    STATE_FILE,
    load_checkpoint,
    save_checkpoint,
)

EPISODE = {
    "messages": [
        {"role": "user", "content": [{"type": "image", "index": 0}, {"type": "text", "text": "How far?"}]},
        {"role": "assistant", "content": "<answer>(A)</answer>"},
    ],
    "images": [imagecodec.to_data_url(np.full((56, 56, 3), 90, np.uint8))],
}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """The arguments of an SFT run (two steps, checkpointed at the end) and its run folder."""
    root = tmp_path_factory.mktemp("sft-run")
    build_tiny_qwen25_vl(root / "model")
    (root / "traces.jsonl").write_text(json.dumps(EPISODE) + "\n", encoding="utf-8")
    out = root / "run"
    arguments = ["--model", str(root / "model"), "--data", str(root / "traces.jsonl")]
    result = CliRunner().invoke(app, ["train", "sft", *arguments, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return arguments, out


def _copy(finished_run: tuple[list[str], Path], tmp_path: Path) -> tuple[list[str], Path]:
    arguments, out = finished_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    return [*arguments, "--out", str(copy)], copy


def _resume_refused(arguments: list[str]) -> str:
    """Resume through the CLI; the one `Error:` line it refused with."""
    result = CliRunner().invoke(app, ["train", "sft", *arguments])
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    return errors[0]


class Payload:
    """What an attacker plants: unpickling it runs a command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_planted_pickle_is_refused_and_runs_nothing(
    finished_run: tuple[list[str], Path], tmp_path: Path
) -> None:
    arguments, out = _copy(finished_run, tmp_path)
    checkpoint = out / "checkpoint"
    state = torch.load(checkpoint / STATE_FILE, weights_only=True)
    marker = tmp_path / "payload-ran"
    torch.save({**state, "note": Payload(marker)}, checkpoint / STATE_FILE)
    # The attacker also rewrites the manifest, so only the loader stands in the way.
    sizes = json.loads((checkpoint / MANIFEST_FILE).read_text())
    sizes[STATE_FILE] = (checkpoint / STATE_FILE).stat().st_size
    (checkpoint / MANIFEST_FILE).write_text(json.dumps(sizes))
    line = _resume_refused(arguments)
    assert not marker.exists()
    assert f"{checkpoint / STATE_FILE}: holds objects other than tensors" in line
    assert "fresh --out" in line


def test_a_deleted_trainer_state_is_refused_not_restarted(
    finished_run: tuple[list[str], Path], tmp_path: Path
) -> None:
    arguments, out = _copy(finished_run, tmp_path)
    metrics = (out / "metrics.jsonl").read_text()
    (out / "checkpoint" / STATE_FILE).unlink()
    line = _resume_refused(arguments)
    assert f"{out / 'checkpoint' / STATE_FILE}: missing" in line
    assert (out / "metrics.jsonl").read_text() == metrics  # nothing cut, nothing retrained


@pytest.mark.parametrize("damaged", [STATE_FILE, f"{MODEL_DIR}/model.safetensors", MANIFEST_FILE])
def test_a_file_cut_short_is_one_line(
    finished_run: tuple[list[str], Path], tmp_path: Path, damaged: str
) -> None:
    arguments, out = _copy(finished_run, tmp_path)
    file = out / "checkpoint" / damaged
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    line = _resume_refused(arguments)
    assert f" {file}: " in line
    assert f"delete {out / 'checkpoint'} to train this stage again" in line


def test_four_kilobytes_flipped_inside_the_weights_are_refused(
    finished_run: tuple[list[str], Path], tmp_path: Path
) -> None:
    arguments, out = _copy(finished_run, tmp_path)
    weights = out / "checkpoint" / MODEL_DIR / "model.safetensors"
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = bytes(byte ^ 0xFF for byte in data[middle : middle + 4096])
    weights.write_bytes(bytes(data))  # same size: only the hash tells
    metrics = (out / "metrics.jsonl").read_text()
    line = _resume_refused(arguments)
    assert f" {weights}: its content changed" in line
    assert (out / "metrics.jsonl").read_text() == metrics


@pytest.mark.parametrize("step", [-3, 0, 10**12, 1.5])
def test_a_step_outside_the_run_is_refused_before_the_metrics_are_cut(
    finished_run: tuple[list[str], Path], tmp_path: Path, step: object
) -> None:
    arguments, out = _copy(finished_run, tmp_path)
    checkpoint = out / "checkpoint"
    state = torch.load(checkpoint / STATE_FILE, weights_only=True)
    torch.save({**state, "step": step}, checkpoint / STATE_FILE)
    manifest = json.loads((checkpoint / MANIFEST_FILE).read_text())
    manifest[STATE_FILE] = (checkpoint / STATE_FILE).stat().st_size  # the resaver fixes the manifest too
    (checkpoint / MANIFEST_FILE).write_text(json.dumps(manifest))
    metrics = (out / "metrics.jsonl").read_text()
    line = _resume_refused(arguments)
    assert f"step {step!r} is not a step of this run (1 to 2)" in line
    assert (out / "metrics.jsonl").read_text() == metrics


def test_a_moved_run_folder_resumes(finished_run: tuple[list[str], Path], tmp_path: Path) -> None:
    _, out = finished_run
    root = tmp_path / "elsewhere"
    shutil.copytree(out.parent, root)  # the model and data move with the run
    arguments = ["--model", str(root / "model"), "--data", str(root / "traces.jsonl")]
    result = CliRunner().invoke(app, ["train", "sft", *arguments, "--out", str(root / "run")])
    assert result.exit_code == 0, result.output
    assert (root / "run" / "metrics.jsonl").read_text() == (out / "metrics.jsonl").read_text()


def test_a_kill_while_deleting_the_old_checkpoint_does_not_block_the_next_save(
    finished_run: tuple[list[str], Path], tmp_path: Path
) -> None:
    from transformers import AutoModelForImageTextToText

    from spacetools.kit.loading import load_processor

    _, out = _copy(finished_run, tmp_path)
    checkpoint = out / "checkpoint"
    # What a kill inside the swap's last `rmtree` leaves: the new checkpoint, and part of the old one.
    retired = checkpoint.with_name("checkpoint.old")
    shutil.copytree(checkpoint, retired)
    (retired / STATE_FILE).unlink()
    state = load_checkpoint(checkpoint)
    assert state is not None and state["step"] == 2 and not retired.exists()
    retired.mkdir()
    (retired / "left-over").write_text("")
    model = AutoModelForImageTextToText.from_pretrained(checkpoint / MODEL_DIR)
    save_checkpoint(checkpoint, model, load_processor(checkpoint / MODEL_DIR), {**state, "step": 3})
    assert load_checkpoint(checkpoint)["step"] == 3  # type: ignore[index]
    assert not retired.exists()
