"""The router of one tool: a fair queue of callers for its instance pool, a per-call timeout and statistics.

Every failure becomes an error result: a tool exception (sanitized by the instance), a timeout (the
instance is killed and replaced, since it may still be busy), a crash (the instance is replaced), a
wait in the queue past `max_queue_wait_s`, or a pool that turns callers away while it cannot restart
its instances. The instances themselves (start, grow, shrink, watch, replace) are the pool's
(`spacetools.toolshed.pool`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from spacetools.kit.definition import ToolContext, ToolResult, error_result
from spacetools.toolshed.backends.base import Instance, InstanceCrashed
from spacetools.toolshed.deadlines import Deadlines
from spacetools.toolshed.pool import MAX_RETRY_S, WATCH_INTERVAL_S, InstancePool, Unavailable
from spacetools.toolshed.stats import ToolStats, percentiles_ms

__all__ = ["ToolRouter"]


class ToolRouter:
    """Dispatches the calls of one tool to its instance pool (`pool`)."""

    def __init__(
        self,
        name: str,
        make_instance: Callable[[], Instance],
        instances: int,
        timeout_s: float,
        backend: str,
        *,
        max_queue_wait_s: float | None = None,
        max_retry_s: float = MAX_RETRY_S,
        watch_interval_s: float = WATCH_INTERVAL_S,
        standby: int = 0,
    ) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.max_queue_wait_s = max_queue_wait_s
        self.backend = backend
        self.stats = ToolStats()
        self.pool = InstancePool(
            name,
            make_instance,
            instances,
            self.stats,
            max_retry_s=max_retry_s,
            watch_interval_s=watch_interval_s,
            standby=standby,
        )
        self._waiting = 0
        self._busy = 0
        self._deadlines = Deadlines()  # the calls' timeouts, on one timer

    # The pool's surface, for the Toolshed, the autoscaler and the health checks.

    @property
    def instances(self) -> list[Instance]:
        """The current instances (replaced ones drop out)."""
        return self.pool.instances

    @property
    def size(self) -> int:
        """The instances the pool holds (or is restarting)."""
        return self.pool.size

    @property
    def standby(self) -> list[Instance]:
        """Started instances kept outside the pool, ready to join it."""
        return self.pool.standby

    @property
    def max_retry_s(self) -> float:
        """The longest wait between restarts of an instance whose setup fails."""
        return self.pool.max_retry_s

    @max_retry_s.setter
    def max_retry_s(self, seconds: float) -> None:
        self.pool.max_retry_s = seconds

    @property
    def available(self) -> bool:
        """Whether calls can be served now (False while every instance is failing to restart)."""
        return self.pool.started and self.pool.unavailable is None

    def availability(self) -> dict[str, Any]:
        """Whether the tool is available, its live instances and, while unavailable or without a live
        instance, why."""
        live = sum(instance.alive for instance in self.pool.instances)
        detail = self.pool.unavailable
        if detail is None and self.pool.started and live == 0:
            detail = f"no {self.name} instance is live; calls wait for the one starting"
        return {
            "available": self.available,
            "live_instances": live,
            "instances": self.pool.size,
            "detail": detail,
        }

    async def start(self) -> None:
        """Start every instance at once; if one fails, stop them all and raise."""
        await self.pool.start()

    async def close(self) -> None:
        """Turn callers away and kill every instance."""
        await self.pool.close()

    async def grow(self, count: int) -> tuple[int, str | None]:
        """Add `count` instances (`InstancePool.grow`): how many joined and the first failure."""
        return await self.pool.grow(count)

    async def shrink(self) -> bool:
        """Take one idle instance out of the pool (`InstancePool.shrink`); False when none is idle."""
        return await self.pool.shrink()

    def release_session(self, session_id: str) -> None:
        """Pass a closed session's release to every live instance (each frees it after its calls)."""
        self.pool.release_session(session_id)

    # The calls.

    async def call(self, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Queue for a free instance, run the call under the timeout, and always return a result.

        Cancelling the call (its client went away) frees its place in the queue, or replaces the
        instance that was running it.
        """
        queued_at = time.perf_counter()
        instance = self.pool.take_idle() if self._waiting == 0 else None
        if instance is None:
            self._waiting += 1
            try:
                instance = await asyncio.wait_for(self.pool.next_instance(), self.max_queue_wait_s)
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
        if isinstance(instance, Unavailable):
            result = ToolResult.error(f"RuntimeError: {instance.message}")
            self.stats.record(result, started_at - queued_at)
            return result
        result = await self._run(instance, method, kwargs, ctx)
        self.stats.record(result, time.perf_counter() - queued_at, started_at - queued_at)
        return result

    async def _run(
        self, instance: Instance, method: str, kwargs: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        """Run one call on `instance` under the timeout; the instance goes back to the pool after."""
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
            self.pool.give_back(instance, reusable)
        return result

    def snapshot(self) -> dict[str, Any]:
        """Live statistics of this tool."""
        stats = self.stats
        return {
            "backend": self.backend,
            "instances": self.pool.size,
            "calls": stats.calls,
            "errors": stats.errors,
            "timeouts": stats.timeouts,
            "crashes": stats.crashes,
            "restarts": stats.restarts,
            "failed_restarts": stats.failed_restarts,
            "queue_timeouts": stats.queue_timeouts,
            "cancelled": stats.cancelled,
            **self.availability(),
            "latency_ms": percentiles_ms(stats.latencies_s),
            "queue_wait_ms": percentiles_ms(stats.waits_s),
            "latency_histogram": stats.latency_histogram.snapshot(),
            "queue_wait_histogram": stats.wait_histogram.snapshot(),
            "queue_depth": self._waiting,
            "busy": self._busy,
            "idle": self.pool.idle,
            "standby": len(self.pool.standby),
        }
