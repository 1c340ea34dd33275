"""The router of one tool: a pool of instances, a fair queue of callers, a per-call timeout and statistics.

Every failure becomes an error result: a tool exception (sanitized by the instance), a timeout (the
instance is killed and replaced, since it may still be busy), a crash (the instance is replaced) or a
wait in the queue past `max_queue_wait_s`. Idle instances that die are noticed by a watcher and replaced
before a call needs them. An instance whose setup fails is retried in the background with capped
exponential back-off for as long as the router runs; while every instance fails so, callers are turned
away at once ("unavailable"), and the tool comes back as soon as a restart succeeds. A new instance
killed while it starts (not a failure of the tool's setup) is started again at once, a few times,
before it counts as failing.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spacetools.kit.definition import ToolContext, ToolResult, error_result
from spacetools.toolshed.backends.base import Instance, InstanceCrashed, SetupFailed
from spacetools.toolshed.deadlines import Deadlines
from spacetools.toolshed.standby import Standby

__all__ = ["ToolRouter", "ToolStats"]

_LATENCY_WINDOW = 10_000
# Histogram bounds, seconds: from a vision op's millisecond to a model call's minute (Prometheus `le`).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class Histogram:
    """Observations counted per bucket since the router started, for Prometheus' histogram type (which a
    scraper can sum over servers and turn into any quantile, unlike recent percentiles)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))  # the last: +Inf
    sum_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.sum_s += seconds

    def snapshot(self) -> dict[str, Any]:
        """Cumulative counts per upper bound (`None`: +Inf), the sum and the count of observations."""
        cumulative, total = [], 0
        for bound, count in zip((*LATENCY_BUCKETS_S, None), self.counts, strict=True):
            total += count
            cumulative.append([bound, total])
        return {"buckets": cumulative, "sum_s": self.sum_s, "count": total}


_FIRST_RETRY_S = 0.5
_MAX_RETRY_S = 30.0
#: How often idle instances are checked for death (each check is a look at a flag per instance).
_WATCH_INTERVAL_S = 0.5
#: Starts killed from outside (not a setup failure) retried at once before they count as failing.
_QUICK_RETRIES = 3
#: The weight of the newest call in a tool's moving average of service time (about the last 20 calls).
_SERVICE_WEIGHT = 0.05


@dataclass
class ToolStats:
    """Counters, recent latencies and latency histograms of one tool."""

    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    crashes: int = 0
    restarts: int = 0
    failed_restarts: int = 0
    queue_timeouts: int = 0
    cancelled: int = 0
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    waits_s: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    latency_histogram: Histogram = field(default_factory=Histogram)
    wait_histogram: Histogram = field(default_factory=Histogram)
    #: Recent time an instance spends on a call (a moving average; None before the first call).
    service_s: float | None = None

    def record(self, result: ToolResult, latency_s: float, wait_s: float | None = None) -> None:
        """Count one finished call (`wait_s` is None when the call never reached an instance)."""
        self.calls += 1
        self.errors += int(result.is_error)
        self.latencies_s.append(latency_s)
        self.latency_histogram.observe(latency_s)
        if wait_s is not None:
            self.waits_s.append(wait_s)
            self.wait_histogram.observe(wait_s)
            service_s = latency_s - wait_s
            self.service_s = (
                service_s
                if self.service_s is None
                else self.service_s + _SERVICE_WEIGHT * (service_s - self.service_s)
            )


def _percentiles_ms(samples: deque[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(np.fromiter(samples, dtype=float), [50, 90, 99]) * 1000.0
    return {"p50": round(float(p50), 3), "p90": round(float(p90), 3), "p99": round(float(p99), 3)}


class _Unavailable:
    """Put in the free queue to turn every waiting and later caller away with `message` (while it is the
    router's current marker: a stale one, from before a recovery, is dropped by whoever takes it)."""

    def __init__(self, message: str) -> None:
        self.message = message


class ToolRouter:
    """Dispatches the calls of one tool to a pool of instances."""

    def __init__(
        self,
        name: str,
        make_instance: Callable[[], Instance],
        instances: int,
        timeout_s: float,
        backend: str,
        *,
        max_queue_wait_s: float | None = None,
        max_retry_s: float = _MAX_RETRY_S,
        watch_interval_s: float = _WATCH_INTERVAL_S,
        standby: int = 0,
    ) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.max_queue_wait_s = max_queue_wait_s
        self.max_retry_s = max_retry_s
        self.watch_interval_s = watch_interval_s
        self.backend = backend
        self.stats = ToolStats()
        self._make_instance = make_instance
        self._size = instances
        self._instances: list[Instance] = []
        self._free: asyncio.Queue[Instance | _Unavailable] = asyncio.Queue()
        self._waiting = 0
        self._busy = 0
        self._replacements: set[asyncio.Task[None]] = set()
        self._started = False
        self._closed = False
        self._unavailable: _Unavailable | None = None
        self._down = 0  # instance slots whose restart failed and is being retried
        self._watcher: asyncio.Task[None] | None = None
        self._standby = Standby(make_instance, standby)
        self._deadlines = Deadlines()  # the calls' timeouts, on one timer

    @property
    def instances(self) -> list[Instance]:
        """The current instances (replaced ones drop out)."""
        return list(self._instances)

    @property
    def size(self) -> int:
        """The instances the pool holds (or is restarting)."""
        return self._size

    @property
    def standby(self) -> list[Instance]:
        """Started instances kept outside the pool, ready to join it (`ToolDeployment.standby_instances`)."""
        return self._standby.instances

    @property
    def available(self) -> bool:
        """Whether calls can be served now (False while every instance is failing to restart)."""
        return self._started and self._unavailable is None

    def availability(self) -> dict[str, Any]:
        """Whether the tool is available, its live instances and, while unavailable or without a live
        instance, why."""
        live = sum(instance.alive for instance in self._instances)
        detail = None if self._unavailable is None else self._unavailable.message
        if detail is None and self._started and live == 0:
            detail = f"no {self.name} instance is live; calls wait for the one starting"
        return {
            "available": self.available,
            "live_instances": live,
            "instances": self._size,
            "detail": detail,
        }

    async def start(self) -> None:
        """Start every instance at once; if one fails, stop them all and raise."""
        self._instances = [self._make_instance() for _ in range(self._size)]
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

    async def call(self, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Queue for a free instance, run the call under the timeout, and always return a result.

        Cancelling the call (its client went away) frees its place in the queue, or replaces the
        instance that was running it.
        """
        queued_at = time.perf_counter()
        instance = self._idle_instance() if self._waiting == 0 else None
        if instance is None:
            self._waiting += 1
            try:
                instance = await asyncio.wait_for(self._next_instance(), self.max_queue_wait_s)
            except asyncio.TimeoutError:
                self.stats.queue_timeouts += 1
                result = ToolResult.error(
                    f"TimeoutError: {method} waited {self.max_queue_wait_s:g} s for a free {self.name} "
                    "instance; the tool is overloaded, try again later"
                )
                self.stats.record(result, time.perf_counter() - queued_at)
                return result
            except asyncio.CancelledError:
                self.stats.cancelled += 1
                raise
            finally:
                self._waiting -= 1
        started_at = time.perf_counter()
        if isinstance(instance, _Unavailable):
            result = ToolResult.error(f"RuntimeError: {instance.message}")
            self.stats.record(result, started_at - queued_at)
            return result

        self._busy += 1
        reusable = False
        try:
            result = await self._deadlines.within(self.timeout_s, instance.invoke(method, kwargs, ctx))
            reusable = True
        except asyncio.TimeoutError:
            self.stats.timeouts += 1
            result = ToolResult.error(f"TimeoutError: {method} did not finish within {self.timeout_s:g} s")
        except asyncio.CancelledError:
            self.stats.cancelled += 1
            raise
        except InstanceCrashed as exc:
            self.stats.crashes += 1
            result = ToolResult.error(
                f"RuntimeError: the {self.name} instance crashed (exit code {exc.exit_code}); a new one is "
                "starting"
            )
        except Exception as exc:  # the backend failed before the tool ran (e.g. an unpicklable argument)
            result = error_result(exc)
            reusable = instance.alive
        finally:
            self._busy -= 1
            # A cancelled, timed-out or crashed call may leave the instance busy or dead: replace it.
            if reusable and instance.alive:
                self._free.put_nowait(instance)
            else:
                self._replace_later(instance)
        self.stats.record(result, time.perf_counter() - queued_at, started_at - queued_at)
        return result

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
            self._size += 1
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
        if isinstance(instance, _Unavailable):
            self._free.put_nowait(instance)
            return False
        self._instances = [other for other in self._instances if other is not instance]
        self._size -= 1
        if not self._standby.offer(instance):
            await instance.kill()
        return True

    def snapshot(self) -> dict[str, Any]:
        """Live statistics of this tool."""
        stats = self.stats
        return {
            "backend": self.backend,
            "instances": self._size,
            "calls": stats.calls,
            "errors": stats.errors,
            "timeouts": stats.timeouts,
            "crashes": stats.crashes,
            "restarts": stats.restarts,
            "failed_restarts": stats.failed_restarts,
            "queue_timeouts": stats.queue_timeouts,
            "cancelled": stats.cancelled,
            **self.availability(),
            "latency_ms": _percentiles_ms(stats.latencies_s),
            "queue_wait_ms": _percentiles_ms(stats.waits_s),
            "latency_histogram": stats.latency_histogram.snapshot(),
            "queue_wait_histogram": stats.wait_histogram.snapshot(),
            "queue_depth": self._waiting,
            "busy": self._busy,
            "idle": self._free.qsize() - int(self._unavailable is not None),
            "standby": len(self._standby.instances),
        }

    def _idle_instance(self) -> Instance | _Unavailable | None:
        """A free instance (or the unavailable marker) taken without waiting; None when none is free.

        Only for a caller with nobody queued before it: it cannot then take an instance freed for
        another.
        """
        while self._started and not self._free.empty():
            taken = self._take(self._free.get_nowait())
            if taken is not None:
                return taken
        return None

    async def _next_instance(self) -> Instance | _Unavailable:
        if not self._started:
            return _Unavailable(f"the {self.name} tool is not started")
        # Yield once first: a caller whose call just ended would otherwise take back the instance it
        # freed before the waiter that was woken for it runs, and starve the queue.
        await asyncio.sleep(0)
        while True:
            taken = self._take(await self._free.get())
            if taken is not None:
                return taken

    def _take(self, item: Instance | _Unavailable) -> Instance | _Unavailable | None:
        """What a caller gets for an item of the free queue: a live instance, the current unavailable
        marker (left in the queue for the next caller too), or None (a stale marker, a dead instance)."""
        if isinstance(item, _Unavailable):
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
                if isinstance(item, _Unavailable) or item.alive:
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
                    if self._down == self._size:  # nothing left to serve calls
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
            if not isinstance(item, _Unavailable):
                self._free.put_nowait(item)

    def _turn_away(self, message: str) -> None:
        if self._unavailable is None:
            self._unavailable = _Unavailable(message)
            self._free.put_nowait(self._unavailable)
