"""Renders shared by the simulated tools of one server: a folder with one file per rendered scene.

Each simulated tool instance, usually a process of its own, keeps the observations it uses in memory
(`~spacetools.tools.simworld.SceneCache`). Without sharing, the pointing model, the segmenter and the
depth model of one conversation would each rebuild and render the same scene (about 150 ms each); with
this store the first one writes the render (RGB, depth, segmentation) and the others read it back in a
millisecond. The ground truth is recomputed from the spec and the render, which is exact and cheap.

The store lives in the server's temporary folder, which its worker processes share and which goes
when the server ends or dies, so a render never outlives the code that made it. A file is named by the
hash of the scene spec and the render size, so whichever tool renders a scene, the file is the same.
Beside it, an empty marker file per session that used it: releasing a session removes its markers and
every render no other session marks. The folder holds at most ``max_bytes`` of renders, least recently
used first out. Files appear by an atomic rename, so a reader sees a whole render or none; a render
removed under a reader is simply rendered again.

Tools of one conversation often ask for a new scene at the same moment (the first turn points at
two objects and estimates the depth at once): `rendering` holds a lock file per scene while one of
them looks for the render and makes it, so the others wait for it and read it back instead of
rendering it again themselves. The kernel drops the lock of a process that dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing.util
import os
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from spacetools.kit.lockfiles import UnsafeLockFileError, open_lock_file
from spacetools.sim.camera import Camera
from spacetools.sim.world import View

RENDER_SUFFIX = ".npz"
LOCK_SUFFIX = ".lock"
BYTES_PER_PIXEL = 3 + 4 + 4
"""A render's bytes per pixel: RGB, float32 depth, int32 segmentation."""
MARKER_SEPARATOR = ".session-"


def default_folder() -> Path:
    """The store's folder: ``renders`` in the server's temporary folder, which the server removes when it
    ends and which its worker processes share (`multiprocessing.util.get_temp_dir`)."""
    return Path(multiprocessing.util.get_temp_dir()) / "renders"


class RenderStore:
    """Rendered views of scenes, shared through files; every method tolerates a folder others change."""

    def __init__(self, max_bytes: int, folder: Path | None = None) -> None:
        self.max_bytes = max_bytes
        self._folder = folder

    @property
    def folder(self) -> Path:
        """Where the renders are (the default is made on first use, in the process that uses it)."""
        if self._folder is None:
            self._folder = default_folder()
        return self._folder

    def _render_path(self, key: str) -> Path:
        return self.folder / f"{key}{RENDER_SUFFIX}"

    @contextlib.contextmanager
    def rendering(self, key: str, pixels: int) -> Iterator[None]:
        """Hold the scene's lock while looking for its render (of ``pixels`` pixels) and making it: tools
        asking for the same scene meanwhile wait here, then find the render stored. No lock for a render
        the store cannot hold, nor without a usable folder."""
        if pixels * BYTES_PER_PIXEL > self.max_bytes:
            yield
            return
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            lock = open_lock_file(self.folder / f"{key}{LOCK_SUFFIX}")
        except (OSError, UnsafeLockFileError):
            yield
            return
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)  # closing drops the lock

    def load(self, key: str, camera: Camera, session_id: str) -> View | None:
        """The stored view of ``key`` seen by ``camera`` (marked as used by the session), or None."""
        path = self._render_path(key)
        try:
            with np.load(path) as arrays:
                view = View(arrays["rgb"], arrays["depth"], arrays["segmentation"], camera)
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            return None  # absent, removed meanwhile or unreadable: the caller renders
        self.mark(key, session_id)
        return view

    def save(self, key: str, view: View, session_id: str) -> None:
        """Keep a view for other tools (marked as used by the session), within the byte bound."""
        size = view.rgb.nbytes + view.depth.nbytes + view.segmentation.nbytes
        if size > self.max_bytes:
            return
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._make_room(size)
            with tempfile.NamedTemporaryFile(dir=self.folder, suffix=".tmp", delete=False) as file:
                np.savez(file, rgb=view.rgb, depth=view.depth, segmentation=view.segmentation)
            os.replace(file.name, self._render_path(key))
        except OSError:
            return  # a full or unwritable folder only costs other tools a render
        self.mark(key, session_id)

    def release(self, session_id: str) -> None:
        """Forget a closed session; remove the renders no open session marks."""
        with contextlib.suppress(OSError):
            for marker in self.folder.glob(f"*{MARKER_SEPARATOR}{session_id}"):
                marker.unlink(missing_ok=True)
                key = marker.name.split(MARKER_SEPARATOR)[0]
                if not any(self.folder.glob(f"{key}{MARKER_SEPARATOR}*")):
                    self._render_path(key).unlink(missing_ok=True)
                    # A tool waiting on this lock renders the scene again: the store no longer holds it.
                    (self.folder / f"{key}{LOCK_SUFFIX}").unlink(missing_ok=True)

    def mark(self, key: str, session_id: str) -> None:
        """Note that a session uses the render of ``key`` (nothing when it is not stored)."""
        with contextlib.suppress(OSError):
            os.utime(self._render_path(key))  # recently used: last out; absent: nothing to mark
            (self.folder / f"{key}{MARKER_SEPARATOR}{session_id}").touch()

    def _make_room(self, size: int) -> None:
        """Remove the least recently used renders (and their markers) until ``size`` more bytes fit."""
        renders = []
        for path in self.folder.glob(f"*{RENDER_SUFFIX}"):
            with contextlib.suppress(OSError):
                stat = path.stat()
                renders.append((stat.st_mtime, stat.st_size, path))
        held = sum(size for _, size, _ in renders)
        for _, old_size, path in sorted(renders):
            if held + size <= self.max_bytes:
                break
            key = path.name.removesuffix(RENDER_SUFFIX)
            for marker in self.folder.glob(f"{key}{MARKER_SEPARATOR}*"):
                marker.unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            held -= old_size
