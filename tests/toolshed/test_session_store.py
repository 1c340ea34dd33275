"""Session memory accounting: per-session and total caps, eviction messages, expiry."""

from __future__ import annotations

import numpy as np
import pytest

from spacetools.kit.definition import ToolError
from spacetools.toolshed.call_arguments import read_arguments
from spacetools.toolshed.session import SessionStore
from spacetools.toolshed.variables import resolve_references


class FakeClock:
    """A controllable clock: the store's time to live is tested without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _array(kib: int) -> np.ndarray:
    return np.zeros(kib * 1024, dtype=np.uint8)


def test_per_session_cap_evicts_least_recently_used_variable() -> None:
    store = SessionStore(max_session_bytes=3 * 1024, max_total_bytes=100 * 1024, ttl_s=60)
    state = store.create([], [], seed=0)
    store.store(state, {"a": _array(1), "b": _array(1), "c": _array(1)})
    store.lookup(state, "a")  # a is now the most recently used
    store.store(state, {"d": _array(1)})
    assert state.variable_names() == ["c", "a", "d"]
    assert state.nbytes == 3 * 1024 == store.total_bytes
    with pytest.raises(ToolError) as info:
        store.lookup(state, "b")
    assert str(info.value) == (
        "variable $b was evicted to stay within the memory limit; call the tool that produced it again"
    )


def test_unknown_variable_lists_available_ones() -> None:
    store = SessionStore(max_session_bytes=1024, max_total_bytes=1024, ttl_s=60)
    state = store.create([], [], seed=0)
    with pytest.raises(ToolError, match=r"^unknown variable \$foo\. No variables are stored yet\.$"):
        store.lookup(state, "foo")
    store.store(state, {"depth_map": 1.0, "point_cloud": 2.0})
    with pytest.raises(ToolError) as info:
        store.lookup(state, "foo")
    assert str(info.value) == "unknown variable $foo. Available variables: $depth_map, $point_cloud"


def test_total_cap_evicts_from_least_recently_used_sessions_first() -> None:
    store = SessionStore(max_session_bytes=4 * 1024, max_total_bytes=4 * 1024, ttl_s=60)
    old, recent = store.create([], [], 0), store.create([], [], 0)
    store.store(old, {"x": _array(2)})
    store.store(recent, {"y": _array(2)})
    store.get(old.id)  # old becomes the most recently used session
    store.store(recent, {"z": _array(2)})
    assert recent.variable_names() == ["z"]  # recent was the LRU session when z arrived
    store.store(old, {"w": _array(1)})  # recent is still the LRU session: its z goes
    assert old.variable_names() == ["x", "w"] and recent.variable_names() == []
    assert store.total_bytes == 3 * 1024


def test_oversized_variable_is_not_kept_and_reads_as_evicted() -> None:
    store = SessionStore(max_session_bytes=1024, max_total_bytes=10 * 1024, ttl_s=60)
    state = store.create([], [], 0)
    assert store.store(state, {"big": _array(2), "small": 1}) == ["big"]
    with pytest.raises(ToolError, match=r"\$big was evicted"):
        store.lookup(state, "big")
    store.store(state, {"big": _array(1)[:10]})  # a later, smaller value replaces the record
    assert "big" in state.variable_names()


def test_idle_sessions_expire_and_release_frees_memory() -> None:
    clock = FakeClock()
    store = SessionStore(max_session_bytes=10 * 1024, max_total_bytes=10 * 1024, ttl_s=5, clock=clock)
    idle, busy = store.create([], [], 0), store.create([], [], 0)
    store.store(idle, {"a": _array(1)})
    store.store(busy, {"b": _array(1)})
    clock.now = 4.0
    store.get(busy.id)
    clock.now = 6.0
    store.sweep()
    assert len(store) == 1 and store.expired == 1 and idle.closed
    with pytest.raises(ToolError, match="closed or expired"):
        store.get(idle.id)
    store.release(busy.id)
    assert store.total_bytes == 0 and len(store) == 0


def test_every_session_that_closes_is_announced_once() -> None:
    clock = FakeClock()
    closed: list[str] = []
    store = SessionStore(10 * 1024, 10 * 1024, ttl_s=5, clock=clock, on_close=closed.append)
    idle, released, kept, last = (store.create([], [], 0) for _ in range(4))
    store.release(released.id)
    store.release(released.id)  # already gone: no second announcement
    clock.now = 4.0
    store.get(kept.id)
    store.get(last.id)
    clock.now = 6.0
    store.sweep()  # the idle one expires
    assert closed == [released.id, idle.id]
    store.release_all()
    assert closed == [released.id, idle.id, kept.id, last.id]


def test_memory_stays_bounded_over_500_sessions() -> None:
    store = SessionStore(max_session_bytes=64 * 1024, max_total_bytes=1024 * 1024, ttl_s=3600)
    peak = 0
    for index in range(500):
        state = store.create([], [], index)
        store.store(state, {"depth_map": _array(48), "mask": _array(16)})
        if index % 2:
            store.release(state.id)
        peak = max(peak, store.total_bytes)
    assert peak <= 1024 * 1024
    assert store.total_bytes == sum(s.nbytes for s in store._sessions.values())
    assert len(store) == 250


def test_references_resolve_inside_lists_and_objects() -> None:
    values = {"mask": "M", "cloud": "C"}
    arguments = {"a": "$mask", "b": ["$cloud", "$5", "costs $3"], "c": {"d": "$mask"}, "e": 2}
    assert resolve_references(arguments, values.__getitem__) == {
        "a": "M",
        "b": ["C", "$5", "costs $3"],
        "c": {"d": "M"},
        "e": 2,
    }
    assert read_arguments("t.m", arguments)[1] == ["mask", "cloud", "mask"]
    # In order of appearance, also where a container comes before a string, and inside tuples.
    later = {"b": [["$inner"], "$outer"], "a": ("$tupled",), "c": "$last", "d": [np.str_("$numpy")]}
    assert read_arguments("t.m", later)[1] == ["inner", "outer", "tupled", "last", "numpy"]
    assert resolve_references(later, str.upper) == {
        "b": [["INNER"], "OUTER"],
        "a": ("TUPLED",),
        "c": "LAST",
        "d": ["NUMPY"],
    }
