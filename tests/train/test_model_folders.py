"""`models get` never touches what is not its own: a folder it did not write is refused (nothing in it
deleted), a symlinked lock file is refused, leftovers of a killed conversion go, two concurrent gets convert
once, and a cached model that no longer matches its manifest is one line that says what to delete.

The conversion itself (40 s of dequantising SmolLM2) is not what these tests are about: where a folder must
be converted, `convert_gguf` is replaced by one that writes a small model-like folder the same way.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.cli.main import app
from spacetools.train import base_models
from spacetools.train.base_models import DONE_FILE, ModelFolderError, get_base_model

NAME = "smollm2-135m"


def _one_error_line(arguments: list[str]) -> str:
    result = CliRunner().invoke(app, arguments)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    return errors[0]


@pytest.fixture
def small_conversion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """Conversions write three small files (slowly enough that a second caller comes while one runs);
    returns the folders converted into."""
    converted: list[Path] = []
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")

    def convert(_: Path, out: Path) -> None:
        converted.append(out)
        time.sleep(0.2)
        (out / "config.json").write_text("{}", encoding="utf-8")
        (out / "model.safetensors").write_bytes(bytes(range(256)) * 64)
        (out / DONE_FILE).write_text("model.gguf\n", encoding="utf-8")

    monkeypatch.setattr(base_models, "convert_gguf", convert)
    monkeypatch.setattr(base_models, "gguf_path", lambda name: gguf)
    return converted


def test_a_folder_with_files_of_its_own_is_refused_and_left_whole(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "other-model").mkdir(parents=True)
    (models / "other-model" / "weights.bin").write_bytes(b"keep")
    (models / "precious.txt").write_text("mine", encoding="utf-8")
    line = _one_error_line(["models", "get", NAME, "--out", str(models)])
    assert f"{models} is not empty and holds no finished model conversion; nothing in it was touched" in line
    assert (models / "precious.txt").read_text(encoding="utf-8") == "mine"
    assert (models / "other-model" / "weights.bin").read_bytes() == b"keep"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["models"]


def test_a_symlinked_out_folder_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "m").symlink_to(target)
    line = _one_error_line(["models", "get", NAME, "--out", str(tmp_path / "m")])
    assert f"{tmp_path / 'm'} is not a folder" in line
    assert list(target.iterdir()) == []


def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(
    tmp_path: Path, small_conversion: list[Path]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep", encoding="utf-8")
    (tmp_path / ".m.lock").symlink_to(victim)
    line = _one_error_line(["models", "get", NAME, "--out", str(tmp_path / "m")])
    assert f"{tmp_path / '.m.lock'} is a symlink, not a lock file" in line
    assert victim.read_text(encoding="utf-8") == "keep"
    assert small_conversion == []


def test_leftovers_of_a_killed_conversion_go_and_an_empty_folder_is_filled(
    tmp_path: Path, small_conversion: list[Path]
) -> None:
    leftover = tmp_path / ".m.staging-killed"
    (leftover / "sub").mkdir(parents=True)
    (leftover / "sub" / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "m").mkdir()
    unrelated = tmp_path / ".m-notes"
    unrelated.mkdir()
    assert get_base_model(NAME, tmp_path / "m") == tmp_path / "m"
    assert not leftover.exists()
    assert unrelated.is_dir()  # not named as our staging folders are
    assert (tmp_path / "m" / DONE_FILE).is_file()
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".m.staging")) == []


def test_two_concurrent_gets_convert_once(tmp_path: Path, small_conversion: list[Path]) -> None:
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(get_base_model(NAME, tmp_path / "m")))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [tmp_path / "m", tmp_path / "m"]
    assert len(small_conversion) == 1


def test_a_cached_model_cut_short_says_what_to_delete(tmp_path: Path, small_conversion: list[Path]) -> None:
    folder = get_base_model(NAME, tmp_path / "m")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ModelFolderError, match=f"{weights}: 100 bytes where 16384 were written"):
        get_base_model(NAME, folder)
    line = _one_error_line(["models", "get", NAME, "--out", str(folder)])
    assert f"delete {folder} and run the command again" in line
    assert len(small_conversion) == 1


def test_a_cache_converted_before_manifests_is_checked_by_its_safetensors_header(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    folder = tmp_path / "m"
    folder.mkdir()
    save_file({"weight": torch.arange(1000, dtype=torch.float32)}, str(folder / "model.safetensors"))
    (folder / DONE_FILE).write_text("model.gguf\n", encoding="utf-8")
    assert get_base_model(NAME, folder) == folder  # whole: used as it is
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    line = _one_error_line(["models", "get", NAME, "--out", str(folder)])
    assert f"{weights}: {weights.stat().st_size} bytes where its header says" in line
    assert f"delete {folder} and run the command again" in line
