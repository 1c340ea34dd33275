"""Warm standby: instances of a tool started ahead of need, outside its pool.

Growing the pool (autoscaling) or replacing a dead instance takes a standby instance at once instead
of waiting for one to start, which for a fresh Ray worker is seconds (Python, Ray and the tool
imported, then `setup()`); a new standby instance then starts in the background. A failed start is
not retried on its own: the next take tries again, so a tool whose setup fails costs no busy loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from spacetools.toolshed.backends.base import Instance

__all__ = ["Standby"]


class Standby:
    """Keeps up to `size` started instances ready to join a pool."""

    def __init__(self, make_instance: Callable[[], Instance], size: int) -> None:
        if size < 0:
            raise ValueError(f"a standby size must be at least 0, got {size}")
        self.size = size
        self.failures = 0
        self.last_failure: str | None = None
        self._make_instance = make_instance
        self._ready: list[Instance] = []
        self._starting: set[asyncio.Task[None]] = set()
        self._killing: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def instances(self) -> list[Instance]:
        """The started instances waiting to be taken."""
        return list(self._ready)

    def take(self) -> Instance | None:
        """A started, live instance (a new one starts in its place), or None when none is ready."""
        taken = None
        while self._ready and taken is None:
            instance = self._ready.pop(0)
            if instance.alive:
                taken = instance
            else:
                self._kill_later(instance)
        self.refill()
        return taken

    def offer(self, instance: Instance) -> bool:
        """Keep a live instance the pool no longer needs, when the standby has room for it."""
        if self._closed or not instance.alive or len(self._ready) + len(self._starting) >= self.size:
            return False
        self._ready.append(instance)
        return True

    def refill(self) -> None:
        """Start instances in the background until `size` are ready or starting."""
        while not self._closed and len(self._ready) + len(self._starting) < self.size:
            task = asyncio.get_running_loop().create_task(self._start_one())
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def close(self) -> None:
        """Stop every standby instance, ready or starting."""
        self._closed = True
        for task in list(self._starting):
            task.cancel()
        await asyncio.gather(*self._starting, *self._killing, return_exceptions=True)
        ready, self._ready = self._ready, []
        await asyncio.gather(*(instance.kill() for instance in ready))

    async def _start_one(self) -> None:
        instance = self._make_instance()
        try:
            await instance.start()
        except asyncio.CancelledError:
            await instance.kill()
            raise
        except Exception as exc:
            await instance.kill()
            self.failures += 1
            self.last_failure = str(exc)
            return
        if self._closed:
            await instance.kill()
        else:
            self._ready.append(instance)

    def _kill_later(self, instance: Instance) -> None:
        task = asyncio.get_running_loop().create_task(instance.kill())
        self._killing.add(task)
        task.add_done_callback(self._killing.discard)
