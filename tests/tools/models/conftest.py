"""Tiny models saved once per test session, a photo, and a Toolshed served over HTTP."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvicorn

from spacetools.toolshed import Toolshed
from spacetools.toolshed.http import create_app
from tiny_qwen import build_tiny_qwen25_vl

from . import tiny_models

BUILDERS: dict[str, Callable[[Path], object]] = {
    "depth_pro": tiny_models.build_depth_pro,
    "depth_anything": tiny_models.build_depth_anything,
    "sam": tiny_models.build_sam,
    "sam_blind": lambda path: tiny_models.build_sam(path, blind=True),
    "sam2": tiny_models.build_sam2,
    "qwen": build_tiny_qwen25_vl,
}


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``model_dir(name)``: the folder of a tiny model, built on first use."""
    root = tmp_path_factory.mktemp("tiny_models")

    def get(name: str) -> Path:
        folder = root / name
        if not folder.exists():
            folder.mkdir()
            BUILDERS[name](folder)
        return folder

    return get


def photo(height: int = 48, width: int = 64, seed: int = 0) -> np.ndarray:
    """A small RGB picture with no scene behind it: a gradient and a bright square."""
    ys, xs = np.mgrid[0:height, 0:width]
    image = np.stack([xs * 255 // width, ys * 255 // height, np.full_like(xs, 90)], axis=-1).astype(np.uint8)
    rng = np.random.default_rng(seed)
    y, x = int(rng.integers(0, height // 2)), int(rng.integers(0, width // 2))
    image[y : y + height // 3, x : x + width // 3] = (240, 200, 40)
    return image


def serving(toolshed: Toolshed) -> contextlib.AbstractContextManager[str]:
    """Serve `toolshed` over HTTP on a free port of 127.0.0.1 in a background thread."""
    return serving_app(create_app(toolshed))


@contextlib.contextmanager
def serving_app(app: Any) -> Iterator[str]:
    """Serve an ASGI app on a free port of 127.0.0.1 in a background thread; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
