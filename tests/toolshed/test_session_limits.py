"""Images count in session memory, and the number of open sessions is capped."""

from __future__ import annotations

import numpy as np
import pytest

from spacetools.kit.errors import MemoryLimitError, TooManySessionsError
from spacetools.toolshed.session import SessionStore

KIB = 1024


def _array(kib: int) -> np.ndarray:
    return np.zeros(kib * KIB, dtype=np.uint8)


def test_images_count_and_variables_make_room_for_them() -> None:
    store = SessionStore(max_session_bytes=10 * KIB, max_total_bytes=100 * KIB, ttl_s=60)
    image = np.zeros((32, 32, 3), dtype=np.uint8)  # 3 KiB
    state = store.create([image], [None], seed=0)
    assert state.image_bytes == state.nbytes == store.total_bytes == store.image_bytes == 3 * KIB
    assert store.store(state, {"a": _array(5)}) == []
    assert store.store(state, {"big": _array(8)}) == ["big"]  # 8 KiB of variable cannot sit beside 3 of image
    store.add_images(state, [image], [None])  # 6 KiB of images: "a" (5 KiB) is evicted to make room
    assert state.variable_names() == [] and state.nbytes == 6 * KIB and len(state.images) == 2
    with pytest.raises(MemoryLimitError, match="over the limit of 10,240 bytes per session"):
        store.add_images(state, [image, image], [None, None])
    assert len(state.images) == 2 and state.nbytes == 6 * KIB  # nothing was added
    store.release(state.id)
    assert store.total_bytes == store.image_bytes == 0


def test_the_total_cap_evicts_other_sessions_variables_then_refuses_images() -> None:
    store = SessionStore(max_session_bytes=10 * KIB, max_total_bytes=12 * KIB, ttl_s=60)
    image = np.zeros((32, 32, 3), dtype=np.uint8)  # 3 KiB
    old = store.create([], [], seed=0)
    store.store(old, {"a": _array(6)})
    first = store.create([image, image], [None, None], seed=1)  # 6 + 6 KiB: fits exactly
    assert old.variable_names() == ["a"] and store.total_bytes == 12 * KIB
    store.create([image], [None], seed=2)  # "a" of the least recently used session goes
    assert old.variable_names() == [] and store.total_bytes == 9 * KIB
    with pytest.raises(MemoryLimitError, match="would pass its limit of 12,288 bytes"):
        store.create([image, image], [None, None], seed=3)
    assert len(store) == 3 and store.total_bytes == 9 * KIB  # the refused session was not kept
    assert first.image_bytes == 6 * KIB


def test_open_sessions_are_capped() -> None:
    store = SessionStore(max_session_bytes=KIB, max_total_bytes=KIB, ttl_s=60, max_sessions=2)
    first = store.create([], [], seed=0)
    store.create([], [], seed=1)
    with pytest.raises(TooManySessionsError, match="maximum of 2 open sessions"):
        store.create([], [], seed=2)
    store.release(first.id)
    store.create([], [], seed=3)
    assert len(store) == 2
