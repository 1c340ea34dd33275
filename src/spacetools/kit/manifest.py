"""A folder's manifest: every file's size and SHA-256, written last and checked before the folder is used.

Cached models and training checkpoints carry one, so a file cut short, lost or changed (a truncated
`model.safetensors`, 4 KB flipped on disk) is found before anything is loaded from it, and the one line
that says so names what to delete. Checking hashes reads every byte once, which the load that follows
would read anyway (2.2 s for SmolLM2's 513 MiB on 2 busy cores).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST_FILE = "files.json"
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """Record every regular file under ``folder`` (its manifest aside) with its size and SHA-256."""
    files = {
        str(file.relative_to(folder)): {"size": file.stat().st_size, "sha256": file_sha256(file)}
        for file in sorted(folder.rglob("*"))
        if file.is_file() and not file.is_symlink() and file.name != MANIFEST_FILE
    }
    (folder / MANIFEST_FILE).write_text(json.dumps(files, indent=1) + "\n", encoding="utf-8")


def manifest_problem(folder: Path) -> tuple[Path, str] | None:
    """The first file of ``folder`` that does not match its manifest and what is wrong with it, or None
    when all match or there is no manifest (a folder written before manifests). An entry that records only
    a size (a manifest of an older layout) is checked by size. Without a manifest (a folder written before
    manifests), each `.safetensors` file is checked against the size its own header gives."""
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        return _safetensors_problem(folder)
    try:
        entries = json.loads(manifest.read_text(encoding="utf-8"))
        if not isinstance(entries, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as error:
        return manifest, f"unreadable ({error})"
    for name, entry in entries.items():
        file = folder / name
        expected = entry if isinstance(entry, dict) else {"size": entry}
        if file.is_symlink() or not file.is_file():
            return file, "missing" if not file.is_symlink() else "a symlink where a file was written"
        size = file.stat().st_size
        if size != expected.get("size"):
            return file, f"{size} bytes where {expected.get('size')} were written (cut short?)"
        if "sha256" in expected and file_sha256(file) != expected["sha256"]:
            return file, "its content changed since it was written (SHA-256 differs)"
    return None


def _safetensors_problem(folder: Path) -> tuple[Path, str] | None:
    """A `.safetensors` file directly in ``folder`` shorter or longer than its header says it is."""
    for file in sorted(folder.glob("*.safetensors")):
        size = file.stat().st_size
        try:
            with file.open("rb") as stream:
                header_size = int.from_bytes(stream.read(8), "little")
                if not 2 <= header_size <= min(size - 8, 100 * 2**20):
                    raise ValueError("no header")
                header = json.loads(stream.read(header_size))
            offsets = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
            return file, f"not a whole safetensors file ({type(error).__name__})"
        expected = 8 + header_size + max(offsets, default=0)
        if size != expected:
            return file, f"{size} bytes where its header says {expected} (cut short?)"
    return None
