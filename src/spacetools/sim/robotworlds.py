"""A pool of robot worlds keyed by tool session: a robot is state, so sessions never share one.

The simulated robot tool builds a session's world on its first robot call, from the scene of its first
image. An evaluation that scores the world its episode left shares the pool with the tool (in-process)
and reads the world after the episode, so the truth never goes through the tools.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from spacetools.sim.robot import MotionError, RobotWorld
from spacetools.sim.scene import SceneSpec

DEFAULT_MAX_WORLDS = 8
CLOSED_SESSIONS_KEPT = 4096
"""How many closed session ids a pool remembers, so that a call still queued when its session closed
does not build that session a world again."""


class RobotWorlds:
    """Robot worlds keyed by tool session.

    Worlds are built on a session's first call and kept, least recently used first out, up to
    `max_worlds`, and freed when their session closes (`release_session`) unless `keep_closed`: an
    evaluation that scores the world its episode left keeps it, and frees it with `release`.
    Thread-safe.
    """

    def __init__(
        self, max_worlds: int = DEFAULT_MAX_WORLDS, record_frames: bool = True, keep_closed: bool = False
    ) -> None:
        self.max_worlds = max_worlds
        self.record_frames = record_frames
        self.keep_closed = keep_closed
        self._worlds: OrderedDict[str, tuple[str, RobotWorld]] = OrderedDict()
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._worlds)

    def for_session(self, session_id: str, spec_json: str) -> RobotWorld:
        """The session's world, built from the scene spec JSON the first time (`MotionError` once the
        session was closed)."""
        with self._lock:
            if session_id in self._closed:
                raise MotionError("the session was closed; its robot's world is gone")
            if session_id in self._worlds:
                self._worlds.move_to_end(session_id)
                return self._worlds[session_id][1]
        world = RobotWorld.from_spec(SceneSpec.model_validate_json(spec_json), self.record_frames)
        with self._lock:
            self._worlds[session_id] = (spec_json, world)
            evicted = []
            while len(self._worlds) > self.max_worlds:
                evicted.append(self._worlds.popitem(last=False)[1][1])
        for old in evicted:
            old.close()
        return world

    def find_by_scene(self, spec_json: str) -> RobotWorld | None:
        """The most recent world built for this scene (how an evaluation finds the world it scores)."""
        with self._lock:
            for key in reversed(self._worlds):
                if self._worlds[key][0] == spec_json:
                    return self._worlds[key][1]
        return None

    def release_session(self, session_id: str) -> None:
        """Free the world of a closed session (kept when `keep_closed`)."""
        if self.keep_closed:
            return
        with self._lock:
            entry = self._worlds.pop(session_id, None)
            self._closed[session_id] = None
            while len(self._closed) > CLOSED_SESSIONS_KEPT:
                self._closed.popitem(last=False)
        if entry is not None:
            entry[1].close()

    def release(self, world: RobotWorld) -> None:
        """Forget and close a world."""
        with self._lock:
            for key, (_, held) in list(self._worlds.items()):
                if held is world:
                    del self._worlds[key]
        world.close()

    def close(self) -> None:
        """Close every world."""
        with self._lock:
            worlds = [world for _, world in self._worlds.values()]
            self._worlds.clear()
        for world in worlds:
            world.close()
