"""No command deletes or truncates a file it did not create: every command that writes a folder is given
one with a planted file, and one of its own with a planted symlink where it writes, and each is refused in
one `Error:` line naming the folder (or the symlink) and the way out, with every planted file, symlink and
symlink target left as it was. (`models get --out`: tests/train/test_model_folders.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacetools.bench.runlock import LOCK_FILE, run_folder_lock
from spacetools.bench.spatialsim import generator
from spacetools.cli.main import app
from spacetools.kit.lockfiles import UnsafeLockFileError
from spacetools.kit.ownfolders import ForeignFolderError

Arguments = Callable[[Path, Path], list[str]]
"""The arguments of a command writing into `out` (first), with its inputs in the second folder."""
DIRL_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "dirl-tiny.yaml"
# (command, the file that marks a folder as the command's own, a file the command writes there)
WRITERS: dict[str, tuple[Arguments, str, str]] = {
    "eval": (
        lambda out, inputs: [
            "eval", "--policy", "scripted", "--data", str(inputs / "data"), "--out", str(out),
        ],
        LOCK_FILE,
        "run.json",
    ),
    "robot eval": (
        lambda out, _: ["robot", "eval", "--policy", "scripted", "--out", str(out)], LOCK_FILE, "run.json"
    ),
    "train sft": (
        lambda out, inputs: [
            "train", "sft", "--model", str(inputs / "model"), "--data", str(inputs / "traces.jsonl"),
            "--out", str(out),
        ],
        LOCK_FILE,
        "config.json",
    ),
    "train grpo": (
        lambda out, inputs: [
            "train", "grpo", "--model", str(inputs / "model"), "--data", str(inputs / "data"), "--out", str(out),
        ],
        LOCK_FILE,
        "config.json",
    ),
    "train dirl": (
        lambda out, _: ["train", "dirl", "--config", str(DIRL_CONFIG), "--out", str(out)], LOCK_FILE, "config.json"
    ),
    "export verl": (lambda out, _: ["export", "verl", "--out", str(out)], "tool_config.yaml", "overrides.txt"),
    "demo": (lambda out, _: ["demo", "--out", str(out), "--n", "1"], "data", "run"),
}  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs the commands accept: a SpatialSim data set, a model folder and a traces file."""
    folder = tmp_path_factory.mktemp("inputs")
    generator.export(folder / "data", n=1, seed=0, families=["cvb2drelation"])
    (folder / "model").mkdir()
    (folder / "model" / "config.json").write_text('{"model_type": "qwen2"}')
    (folder / "traces.jsonl").write_text("")
    return folder


def _one_error_line(arguments: list[str]) -> str:
    result = CliRunner().invoke(app, arguments)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    return " ".join(result.output.split())


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): str(path.readlink()) if path.is_symlink() else path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_symlink() or path.is_file()
    }


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_folder_with_a_planted_file_is_refused_and_left_whole(
    command: str, tmp_path: Path, inputs: Path
) -> None:
    arguments, _, _ = WRITERS[command]
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    line = _one_error_line(arguments(out, inputs))
    assert f"{out} is not empty and is not a" in line and "nothing in it was touched" in line
    assert _tree(out) == {"precious.txt": "mine"}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_a_planted_symlink_in_a_folder_of_its_own_is_refused_and_its_target_untouched(
    command: str, tmp_path: Path, inputs: Path
) -> None:
    arguments, marker, written = WRITERS[command]
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / marker).write_text("") if marker != "data" else (out / marker).mkdir()
    (out / written).symlink_to(victim)
    before = _tree(out)
    line = _one_error_line(arguments(out, inputs))
    assert f"{out / written} is a symlink" in line and "nothing was written" in line
    assert victim.read_text() == "keep" and _tree(out) == before


@pytest.mark.parametrize("command", ["eval", "robot eval", "train sft"])
def test_a_symlinked_run_lock_is_refused_and_its_target_keeps_its_bytes(
    command: str, tmp_path: Path, inputs: Path
) -> None:
    arguments, _, _ = WRITERS[command]
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).symlink_to(victim)
    line = _one_error_line(arguments(out, inputs))
    assert f"{out / LOCK_FILE} is a symlink" in line
    assert victim.read_text() == "keep"


def test_the_run_lock_itself_never_follows_a_symlink_or_opens_a_non_file(tmp_path: Path) -> None:
    """Behind the command-line check: a lock planted between the check and the open, or a folder where
    the lock file goes, is refused by the lock itself."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / LOCK_FILE).symlink_to(victim)
    with pytest.raises(ForeignFolderError, match="is a symlink"), run_folder_lock(tmp_path / "a"):
        pass
    from spacetools.kit.lockfiles import open_lock_file

    with pytest.raises(UnsafeLockFileError, match="is a symlink, not a lock file"):
        open_lock_file(tmp_path / "a" / LOCK_FILE)
    (tmp_path / "b" / LOCK_FILE).mkdir(parents=True)
    with pytest.raises(UnsafeLockFileError):
        open_lock_file(tmp_path / "b" / LOCK_FILE)
    assert victim.read_text() == "keep"


def test_data_generate_overwrite_replaces_a_planted_symlink_not_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim.parquet"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    (out / "spatialsim_cvb2drelation.parquet").symlink_to(victim)
    arguments = ["data", "generate", "--out", str(out), "--n", "1", "--families", "cvb2drelation"]
    assert "not empty" in _one_error_line([*arguments, "--workers", "1"])
    result = CliRunner().invoke(app, [*arguments, "--workers", "1", "--overwrite"])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "keep" and (out / "precious.txt").read_text() == "mine"
    assert not (out / "spatialsim_cvb2drelation.parquet").is_symlink()


@pytest.mark.parametrize("command", ["train traces", "train traces log", "train mix", "data show"])
def test_a_symlink_where_a_file_is_written_is_refused_and_its_target_untouched(
    command: str, tmp_path: Path, inputs: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    link = tmp_path / "out" / ("run.log" if command == "train traces log" else "written.png")
    link.parent.mkdir()
    link.symlink_to(victim)
    target = tmp_path / "out" / "traces.jsonl" if command == "train traces log" else link
    arguments = {
        "train traces": ["train", "traces", "--data", str(inputs / "data"), "--out", str(target)],
        "train mix": ["train", "mix", "--source", f"{inputs / 'traces.jsonl'}=1", "--out", str(target)],
        "data show": ["data", "show", str(inputs / "data"), "--index", "0", "--out", str(target)],
    }[command.removesuffix(" log")]
    line = _one_error_line(arguments)
    assert f"{link} is a symlink; nothing was written through it" in line
    assert victim.read_text() == "keep" and not target.with_name("traces.jsonl").exists()
