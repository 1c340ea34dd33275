"""The instance pool of one tool: start, grow, shrink, watch and replace its instances.

Free instances wait in a queue that callers take from (`ToolRouter`, which routes the calls). Idle
instances that die are noticed by a watcher and replaced before a call needs them. An instance whose
setup fails is retried in the background with capped exponential back-off for as long as the pool
runs; while every instance fails so, the pool turns callers away at once ("unavailable") with a marker
in the free queue, and the tool comes back as soon as a restart succeeds. A new instance killed while
it starts (not a failure of the tool's setup) is started again at once, a few times, before it counts
as failing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from spacetools.toolshed.backends.base import Instance, SetupFailed
from spacetools.toolshed.standby import Standby
from spacetools.toolshed.stats import ToolStats

__all__ = ["InstancePool", "Unavailable"]

_FIRST_RETRY_S = 0.5
MAX_RETRY_S = 30.0
#: How often idle instances are checked for death (each check is a look at a flag per instance).
WATCH_INTERVAL_S = 0.5
#: Starts killed from outside (not a setup failure) retried at once before they count as failing.
_QUICK_RETRIES = 3


class Unavailable:
    """Put in the free queue to turn every waiting and later caller away with `message` (while it is the
    pool's current marker: a stale one, from before a recovery, is dropped by whoever takes it)."""

    def __init__(self, message: str) -> None:
        self.message = message


class InstancePool:
    """The instances of one tool and the queue of the free ones; counts crashes and restarts in `stats`."""

    def __init__(
        self,
        name: str,
        make_instance: Callable[[], Instance],
        size: int,
        stats: ToolStats,
        *,
        max_retry_s: float = MAX_RETRY_S,
        watch_interval_s: float = WATCH_INTERVAL_S,
        standby: int = 0,
    ) -> None:
        self.name = name
        self.stats = stats
        self.max_retry_s = max_retry_s
        self.watch_interval_s = watch_interval_s
        self.size = size
        self._make_instance = make_instance
        self._instances: list[Instance] = []
        self._free: asyncio.Queue[Instance | Unavailable] = asyncio.Queue()
        self._replacements: set[asyncio.Task[None]] = set()
        self._started = False
        self._closed = False
        self._unavailable: Unavailable | None = None
        self._down = 0  # instance slots whose restart failed and is being retried
        self._watcher: asyncio.Task[None] | None = None
        self._standby = Standby(make_instance, standby)

    @property
    def instances(self) -> list[Instance]:
        """The current instances (replaced ones drop out)."""
        return list(self._instances)

    @property
    def standby(self) -> list[Instance]:
        """Started instances kept outside the pool, ready to join it (`ToolDeployment.standby_instances`)."""
        return self._standby.instances

    @property
    def started(self) -> bool:
        """True once `start()` succeeded."""
        return self._started

    @property
    def unavailable(self) -> str | None:
        """Why callers are turned away now; None while the pool serves."""
        return None if self._unavailable is None else self._unavailable.message

    @property
    def idle(self) -> int:
        """Instances free for a call now."""
        return self._free.qsize() - int(self._unavailable is not None)

    async def start(self) -> None:
        """Start every instance at once; if one fails, stop them all and raise."""
        self._instances = [self._make_instance() for _ in range(self.size)]
        outcomes = await asyncio.gather(
            *(instance.start() for instance in self._instances), return_exceptions=True
        )
        failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failures:
            await asyncio.gather(*(instance.kill() for instance in self._instances))
            raise RuntimeError(f"tool {self.name} failed to start: {failures[0]}") from failures[0]
        for instance in self._instances:
            self._free.put_nowait(instance)
        self._started = True
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        self._standby.refill()

    async def close(self) -> None:
        """Turn callers away and kill every instance."""
        self._closed = True
        self._turn_away(f"the {self.name} tool was shut down")
        if self._watcher is not None:
            self._watcher.cancel()
        for task in list(self._replacements):
            task.cancel()
        await asyncio.gather(*self._replacements, return_exceptions=True)
        await self._standby.close()
        await asyncio.gather(*(instance.kill() for instance in self._instances))

    def take_idle(self) -> Instance | Unavailable | None:
        """A free instance (or the unavailable marker) taken without waiting; None when none is free.

        Only for a caller with nobody queued before it: it cannot then take an instance freed for
        another.
        """
        while self._started and not self._free.empty():
            taken = self._take(self._free.get_nowait())
            if taken is not None:
                return taken
        return None

    async def next_instance(self) -> Instance | Unavailable:
        """Wait for a free instance (or the unavailable marker)."""
        if not self._started:
            return Unavailable(f"the {self.name} tool is not started")
        # Yield once first: a caller whose call just ended would otherwise take back the instance it
        # freed before the waiter that was woken for it runs, and starve the queue.
        await asyncio.sleep(0)
        while True:
            taken = self._take(await self._free.get())
            if taken is not None:
                return taken

    def give_back(self, instance: Instance, reusable: bool) -> None:
        """Return an instance after a call: to the free queue if it can take another, else replaced (a
        cancelled, timed-out or crashed call may leave it busy or dead)."""
        if reusable and instance.alive:
            self._free.put_nowait(instance)
        else:
            self._replace_later(instance)

    def release_session(self, session_id: str) -> None:
        """Pass a closed session's release to every live instance (each frees it after its calls)."""
        for instance in self._instances:
            if instance.alive:
                instance.release_session(session_id)

    async def grow(self, count: int) -> tuple[int, str | None]:
        """Add `count` instances (autoscaling), each joining the pool as soon as it is up: standby
        instances at once, then new ones.

        Returns how many joined and the first failure; a shutdown meanwhile kills those still starting.
        """

        async def add_one() -> None:
            instance = self._standby.take()
            try:
                if instance is None:
                    instance = self._make_instance()
                    await instance.start()
                if self._unavailable is not None:
                    raise RuntimeError(f"the {self.name} tool was shut down")
            except BaseException:
                if instance is not None:
                    await instance.kill()
                raise
            self._instances.append(instance)
            self.size += 1
            self._free.put_nowait(instance)

        outcomes = await asyncio.gather(*(add_one() for _ in range(count)), return_exceptions=True)
        failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        return count - len(failures), str(failures[0]) if failures else None

    async def shrink(self) -> bool:
        """Take one idle instance out of the pool (autoscaling): into the standby when it has room,
        else stopped; False when none is idle."""
        if self._free.empty():
            return False
        instance = self._free.get_nowait()
        if isinstance(instance, Unavailable):
            self._free.put_nowait(instance)
            return False
        self._instances = [other for other in self._instances if other is not instance]
        self.size -= 1
        if not self._standby.offer(instance):
            await instance.kill()
        return True

    def _take(self, item: Instance | Unavailable) -> Instance | Unavailable | None:
        """What a caller gets for an item of the free queue: a live instance, the current unavailable
        marker (left in the queue for the next caller too), or None (a stale marker, a dead instance)."""
        if isinstance(item, Unavailable):
            if item is not self._unavailable:
                return None  # stale: the tool recovered since
            self._free.put_nowait(item)
            return item
        if item.alive:
            return item
        self.stats.crashes += 1  # died while idle
        self._replace_later(item)
        return None

    def _replace_later(self, instance: Instance) -> None:
        task = asyncio.get_running_loop().create_task(self._replace(instance))
        self._replacements.add(task)
        task.add_done_callback(self._replacements.discard)

    async def _watch(self) -> None:
        """Replace instances that die while idle, without waiting for a call to find them dead."""
        while True:
            await asyncio.sleep(self.watch_interval_s)
            queued = [self._free.get_nowait() for _ in range(self._free.qsize())]
            for item in queued:
                if isinstance(item, Unavailable) or item.alive:
                    self._free.put_nowait(item)
                else:
                    self.stats.crashes += 1  # died while idle
                    self._replace_later(item)

    async def _replace(self, old: Instance) -> None:
        """Start a new instance in place of `old`: at once again when the new one is killed while it
        starts (a few times), with capped back-off while its setup fails."""
        await old.kill()
        attempt = 0  # setup failures so far: the exponent of the back-off
        killed = 0  # starts in a row that died without a setup failure
        down = False  # counted among the slots that cannot serve
        while True:
            new = self._standby.take()
            if new is not None:
                break
            new = self._make_instance()
            try:
                await new.start()
            except Exception as exc:
                await new.kill()
                self.stats.failed_restarts += 1
                if not isinstance(exc, SetupFailed) and killed < _QUICK_RETRIES:
                    killed += 1
                    continue
                if not down:
                    down = True
                    self._down += 1
                    if self._down == self.size:  # nothing left to serve calls
                        self._turn_away(f"the {self.name} tool is unavailable (restarting): {exc}")
                await asyncio.sleep(min(_FIRST_RETRY_S * 2 ** min(attempt, 16), self.max_retry_s))
                attempt += 1
                continue
            break
        self._instances = [new if instance is old else instance for instance in self._instances]
        self.stats.restarts += 1
        if down:
            self._down -= 1
            if self._unavailable is not None and not self._closed:
                self._come_back()
        self._free.put_nowait(new)

    def _come_back(self) -> None:
        """Take the unavailable marker out of the free queue: callers wait for instances again."""
        self._unavailable = None
        queued = [self._free.get_nowait() for _ in range(self._free.qsize())]
        for item in queued:
            if not isinstance(item, Unavailable):
                self._free.put_nowait(item)

    def _turn_away(self, message: str) -> None:
        if self._unavailable is None:
            self._unavailable = Unavailable(message)
            self._free.put_nowait(self._unavailable)
