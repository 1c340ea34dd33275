"""Autoscaling: a tool's pool grows when calls queue too long and shrinks when instances sit idle.

Every `interval_s` the autoscaler reads the router: when calls are waiting and either the recent queue
waits exceed the target or no waiting call got an instance since the last look, it grows the pool at once
to one instance per outstanding call (capped at the maximum); when an instance has been idle with
nothing queued for `idle_s`, it stops one. Each decision is kept, with its reason, for the statistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from datetime import datetime, timezone
from typing import Any

import numpy as np

from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.router import ToolRouter

__all__ = ["Autoscaler", "autoscaler_for"]

_EVENTS_KEPT = 50


class Autoscaler:
    """Keeps the pool of one router between `minimum` and `maximum` instances."""

    def __init__(
        self,
        router: ToolRouter,
        minimum: int,
        maximum: int,
        target_wait_s: float,
        idle_s: float,
        interval_s: float = 0.2,
    ) -> None:
        if not 1 <= minimum <= maximum:
            raise ValueError(f"need 1 <= minimum ({minimum}) <= maximum ({maximum})")
        self.router = router
        self.minimum = minimum
        self.maximum = maximum
        self.target_wait_s = target_wait_s
        self.idle_s = idle_s
        self.interval_s = interval_s
        self.events: deque[dict[str, Any]] = deque(maxlen=_EVENTS_KEPT)
        self._seen_waits = 0
        self._idle_since: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start watching the router (on the running event loop)."""
        self._seen_waits = self._wait_count()
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        """Stop watching (the pool keeps its current size until the router closes)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def snapshot(self) -> dict[str, Any]:
        """The bounds and the recent scale events (oldest first)."""
        return {"min": self.minimum, "max": self.maximum, "events": list(self.events)}

    async def step(self) -> None:
        """Look at the router once and grow or shrink the pool if needed."""
        snapshot = self.router.snapshot()
        size, waiting, busy, idle = (
            snapshot["instances"],
            snapshot["queue_depth"],
            snapshot["busy"],
            snapshot["idle"],
        )
        recent = self._recent_waits()
        now = time.monotonic()
        if waiting > 0 and size < self.maximum:
            self._idle_since = None
            p90_ms = float(np.percentile(recent, 90)) * 1000 if recent.size else None
            if p90_ms is None or p90_ms > self.target_wait_s * 1000:
                why = (
                    f"p90 queue wait {p90_ms:.0f} ms > {self.target_wait_s * 1000:.0f} ms"
                    if p90_ms is not None
                    else "no waiting call got an instance"
                )
                wanted = min(self.maximum, busy + waiting)
                joined, failure = await self.router.pool.grow(wanted - size)
                failed = f"; {wanted - size - joined} failed to start: {failure}" if failure else ""
                self._record(
                    size, size + joined, f"{waiting} calls queued, {why}{failed}", force=bool(failure)
                )
            return
        if idle > 0 and waiting == 0 and size > self.minimum:
            if self._idle_since is None:
                self._idle_since = now
            elif now - self._idle_since >= self.idle_s and await self.router.pool.shrink():
                self._record(size, size - 1, f"{idle} instance(s) idle for {self.idle_s:g} s")
                self._idle_since = now
            return
        self._idle_since = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.step()

    def _wait_count(self) -> int:
        return self.router.stats.calls

    def _recent_waits(self) -> np.ndarray:
        """The queue waits of the calls that finished since the last look."""
        count = self._wait_count()
        new, self._seen_waits = count - self._seen_waits, count
        waits = self.router.stats.waits_s
        new = min(new, len(waits))
        return np.fromiter(list(waits)[len(waits) - new :], dtype=float) if new else np.empty(0)

    def _record(self, before: int, after: int, reason: str, force: bool = False) -> None:
        if before == after and not force:
            return
        self.events.append(
            {
                "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                "from": before,
                "to": after,
                "reason": reason,
            }
        )


def autoscaler_for(deployment: ToolDeployment, router: ToolRouter) -> Autoscaler | None:
    """The autoscaler of a deployment whose `max_instances` exceeds `instances`, else None."""
    if deployment.max_instances is None or deployment.max_instances == deployment.instances:
        return None
    return Autoscaler(
        router,
        deployment.instances,
        deployment.max_instances,
        deployment.target_queue_wait_ms / 1000,
        deployment.scale_down_idle_s,
    )
