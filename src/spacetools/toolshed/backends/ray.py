"""Ray backend: each instance is a Ray actor holding its CPU/GPU share, optionally in a placement group.

The actor constructs the tool and runs `setup()` on whichever node Ray places it. A call is one actor
task with one argument and one return object; the session's part of its context goes to an actor once
per session (`backends.context`). Big array variables stay in the cluster: the actor keeps them aside,
and the server asks for them in a second task, whose return object Ray keeps in the object store of the
actor's node (owned by the server, so it outlives the actor); the session holds a `ClusterArray` handle
and a later call passes the handle, which the next actor reads from the store. Only the result's text,
images and small variables come back to the server.

`ray` is imported on first use, so a Toolshed without Ray actors never pays for it.
"""

from __future__ import annotations

import asyncio
import io
import os
import pickle
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from spacetools.kit.batched_methods import BatchResult, invoke_call
from spacetools.kit.definition import (
    Tool,
    ToolContext,
    ToolResult,
    release_tool_session,
    releases_sessions,
    sanitize_error_text,
)
from spacetools.toolshed.backends.base import InstanceCrashed, SetupFailed
from spacetools.toolshed.backends.context import ContextReceiver, ContextSender, WireContext
from spacetools.toolshed.deployment import ToolDeployment, resolve_tool_class

if TYPE_CHECKING:
    import ray

__all__ = ["BULK_BYTES", "ClusterArray", "RayInstance", "connect", "fetch_cluster_values", "ray_factory"]

#: Arrays at least this big stay in the object store (Ray inlines smaller objects in replies anyway).
BULK_BYTES = 100 * 1024


def connect(address: str | None = None) -> None:
    """Join the Ray cluster at `address` ("auto", "host:port", or None: RAY_ADDRESS or a local Ray)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)


class ClusterArray:
    """A handle to an array a Ray actor produced, kept in Ray's object store until the session drops it."""

    def __init__(
        self, ref: ray.ObjectRef[Any], key: str, shape: tuple[int, ...], dtype: str, nbytes: int
    ) -> None:
        self.ref = ref
        self.key = key
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.nbytes = nbytes

    def fetch(self) -> np.ndarray:
        """The array itself (read-only, zero-copy on the node that holds it)."""
        import ray

        array: np.ndarray = ray.get(self.ref)[self.key]
        return array

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self.fetch()
        return array if dtype is None else array.astype(dtype)

    def __sizeof__(self) -> int:
        # The session's memory caps count the data this handle keeps alive in the cluster.
        return self.nbytes

    def __repr__(self) -> str:
        return f"ClusterArray(shape={self.shape}, dtype={self.dtype})"


def fetch_cluster_values(value: Any) -> Any:
    """`value` with every `ClusterArray` (also inside lists and dicts) replaced by its array."""
    if isinstance(value, ClusterArray):
        return value.fetch()
    if isinstance(value, list):
        return [fetch_cluster_values(item) for item in value]
    if isinstance(value, dict):
        return {key: fetch_cluster_values(item) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class _BulkSlot:
    """Where a big variable went: a key into the dict of the call's big arrays."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def _split_bulk(result: ToolResult) -> dict[str, np.ndarray]:
    """Move big array variables (of every result of a batch) out of `result` into a dict."""
    bulk: dict[str, np.ndarray] = {}
    parts = result.results if isinstance(result, BatchResult) else [result]
    for index, part in enumerate(parts):
        for name, value in list(part.variables.items()):
            if isinstance(value, np.ndarray) and value.nbytes >= BULK_BYTES:
                key = f"{index}:{name}"
                bulk[key] = value
                part.variables[name] = _BulkSlot(key, value.shape, value.dtype.str, value.nbytes)
    return bulk


def _has_bulk(result: ToolResult) -> bool:
    parts = result.results if isinstance(result, BatchResult) else [result]
    return any(isinstance(value, _BulkSlot) for part in parts for value in part.variables.values())


def _attach_bulk(result: ToolResult, bulk_ref: ray.ObjectRef[Any]) -> ToolResult:
    parts = result.results if isinstance(result, BatchResult) else [result]
    for part in parts:
        for name, value in list(part.variables.items()):
            if isinstance(value, _BulkSlot):
                part.variables[name] = ClusterArray(
                    bulk_ref, value.key, value.shape, value.dtype, value.nbytes
                )
    return result


#: One call as the actor takes it: `(number, method, kwargs, wire)`, the call's number on its instance,
#: the method, the keyword arguments and the context (`WireContext`). Pickled here into bytes, which Ray
#: passes through untouched (its msgpack and cloudpickle steps cost more than the call on both ends);
#: arguments holding `ClusterArray` handles (or anything plain pickle refuses) go as a list for Ray to
#: serialize, which must see the object refs inside to keep their objects alive for the actor.
_Call = bytes | list[Any]
_PROTOCOL = pickle.HIGHEST_PROTOCOL


class _HoldsClusterValues(Exception):
    """A call's arguments hold a `ClusterArray`: Ray serializes the call itself."""


def _refuse_cluster_array(_value: ClusterArray) -> Any:
    raise _HoldsClusterValues


class _CallPickler(pickle.Pickler):
    """Pickles a call, refusing `ClusterArray` handles."""

    dispatch_table = types.MappingProxyType({ClusterArray: _refuse_cluster_array})


def _pack_call(number: int, method: str, kwargs: dict[str, Any], wire: WireContext) -> _Call:
    buffer = io.BytesIO()
    try:
        _CallPickler(buffer, _PROTOCOL).dump((number, method, kwargs, wire))
    except Exception:
        # Lists, not tuples: Ray packs lists of plain values with msgpack, a tuple with cloudpickle.
        return [number, method, kwargs, list(wire)]
    return buffer.getvalue()


class _ToolActor:
    """The actor class: one tool object on a Ray worker process."""

    def __init__(self, tool_ref: type[Tool] | str, config: dict[str, Any]) -> None:
        self._tool_ref = tool_ref
        self._config = config
        self._tool: Tool | None = None
        self._contexts = ContextReceiver()
        self._bulk: tuple[int, dict[str, np.ndarray]] | None = None  # the last call's big arrays

    def setup(self) -> tuple[str, Any]:
        try:
            self._tool = resolve_tool_class(self._tool_ref)(**self._config)
            self._tool.setup()
        except Exception as exc:
            return "failed", sanitize_error_text(f"{type(exc).__name__}: {exc}")
        return "ready", os.getpid()

    def invoke(self, call: _Call) -> bytes | ToolResult:
        """Run one call; its big arrays wait for `take_bulk`.

        The result goes back pickled here, as bytes that Ray passes through, unless it holds big arrays
        (or plain pickle refuses it): then as itself, and the server asks for the big arrays.
        """
        assert self._tool is not None, "setup() runs first"
        if isinstance(call, bytes):
            number, method, kwargs, wire = pickle.loads(call)
        else:  # arguments with cluster values
            number, method, kwargs, wire = call
            kwargs = fetch_cluster_values(kwargs)
        result = invoke_call(self._tool, method, kwargs, self._contexts.unpack(wire))
        bulk = _split_bulk(result)
        if bulk:
            self._bulk = (number, bulk)
            return result
        self._bulk = None
        try:
            return pickle.dumps(result, _PROTOCOL)
        except Exception:
            return result

    def take_bulk(self, number: int) -> dict[str, np.ndarray]:
        """The big arrays of call `number`, to become a return object the server owns."""
        bulk, self._bulk = self._bulk, None
        if bulk is None or bulk[0] != number:
            raise RuntimeError(f"the big arrays of call {number} are gone")
        return bulk[1]

    def release_session(self, session_id: str) -> None:
        assert self._tool is not None, "setup() runs first"
        self._contexts.forget(session_id)
        release_tool_session(self._tool, session_id)

    def watch(self) -> None:
        """Never returns (it runs in its own concurrency group): its failure tells the server of a death."""
        threading.Event().wait()


_actor_class: Any = None


def _remote_actor_class() -> Any:
    global _actor_class
    if _actor_class is None:
        import ray

        # The "watch" group holds one call that never ends, so that an idle actor's death is noticed too
        # (the ignore: Ray's typed overloads of ray.remote omit the actor option concurrency_groups).
        _actor_class = ray.remote(concurrency_groups={"watch": 1})(_ToolActor)  # type: ignore[call-overload]
    return _actor_class


class _Placement:
    """The placement group of one deployment: a bundle per instance, created with its first instance.

    Removed when its last instance is killed, which also frees the reservation between Toolsheds.
    """

    def __init__(self, strategy: str, bundles: int, num_cpus: float, num_gpus: float) -> None:
        self._strategy = strategy.upper()
        self._bundle = {"CPU": num_cpus, "GPU": num_gpus}
        self._bundles = bundles
        self._group: Any = None
        self._users = 0

    async def acquire(self, timeout_s: float) -> Any:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self._group is None:
            bundle = {resource: amount for resource, amount in self._bundle.items() if amount > 0}
            self._group = placement_group([bundle or {"CPU": 0.001}] * self._bundles, strategy=self._strategy)
        self._users += 1
        try:
            await asyncio.wait_for(self._group.ready(), timeout_s)
        except asyncio.TimeoutError:
            self.release()
            raise RuntimeError(
                f"the Ray cluster cannot place {self._bundles} × {self._bundle} ({self._strategy}) "
                f"within {timeout_s:g} s"
            ) from None
        # Bundle -1: any bundle with room, so a replacement takes the bundle its predecessor freed.
        return PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=-1)

    def release(self) -> None:
        from ray.util.placement_group import remove_placement_group

        self._users -= 1
        if self._users == 0 and self._group is not None:
            remove_placement_group(self._group)
            self._group = None


class RayInstance:
    """A tool instance living in a Ray actor."""

    def __init__(
        self,
        tool: type[Tool] | str,
        config: dict[str, Any],
        name: str,
        *,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        placement: _Placement | None = None,
        start_timeout_s: float = 600.0,
    ) -> None:
        self._tool_ref = tool
        self._config = dict(config)
        self._name = name
        self._resources = {"num_cpus": num_cpus, "num_gpus": num_gpus}
        self._placement = placement
        self._placed = False
        self._start_timeout_s = start_timeout_s
        self._actor: Any = None
        self._invoke: Any = None
        self._pid: int | None = None
        #: True from a successful start until the actor dies or is killed (a plain attribute: the router
        #: reads it on every call).
        self.alive = False
        self._releases = releases_sessions(resolve_tool_class(tool))
        self._contexts = ContextSender()
        self._calls = 0

    @property
    def pid(self) -> int | None:
        """The process id of the actor's worker (on its node)."""
        return self._pid

    async def start(self) -> None:
        """Create the actor and wait until its tool is set up."""
        import ray

        connect()
        # max_restarts=0: the router, not Ray, replaces a dead actor, so that the call it was running
        # fails clearly and is counted; max_concurrency=1: the router gives each instance one call at once.
        options: dict[str, Any] = dict(self._resources, max_restarts=0, max_concurrency=1)
        if self._placement is not None:
            options["scheduling_strategy"] = await self._placement.acquire(self._start_timeout_s)
            self._placed = True
        self._actor = _remote_actor_class().options(**options).remote(self._tool_ref, self._config)
        try:
            status, detail = await asyncio.wait_for(self._actor.setup.remote(), self._start_timeout_s)
        except asyncio.TimeoutError:
            await self.kill()
            raise SetupFailed(
                f"{self._name} setup did not finish within {self._start_timeout_s:g} s"
            ) from None
        except ray.exceptions.RayError as exc:
            await self.kill()
            raise RuntimeError(f"{self._name} actor failed to start: {type(exc).__name__}") from exc
        if status != "ready":
            await self.kill()
            raise SetupFailed(f"{self._name} setup failed: {detail}")
        self._pid = detail
        self._invoke = self._actor.invoke  # a method handle made once (each attribute read makes one)
        self.alive = True
        watch = self._actor.watch.options(concurrency_group="watch").remote()
        watch.future().add_done_callback(self._on_death)

    async def invoke(self, method: str, kwargs: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run one call on the actor; its death is an `InstanceCrashed` (Ray reports no exit code)."""
        import ray

        if not self.alive:
            raise InstanceCrashed(None)
        self._calls += 1
        try:
            result_ref = self._invoke.remote(
                _pack_call(self._calls, method, kwargs, self._contexts.pack(ctx))
            )
        except Exception:
            self._contexts.forget(ctx.session_id)  # the actor did not get it: send it again next time
            raise
        try:
            outcome: bytes | ToolResult = await result_ref
        except ray.exceptions.RayActorError:
            self.alive = False
            raise InstanceCrashed(None) from None
        if isinstance(outcome, bytes):
            result: ToolResult = pickle.loads(outcome)
            return result
        if _has_bulk(outcome):
            # Asked for before any later call can reach the actor, so its arrays are still there.
            _attach_bulk(outcome, self._actor.take_bulk.remote(self._calls))
        return outcome

    def release_session(self, session_id: str) -> None:
        """Queue the session's release on the actor (one call at a time: after the calls before it),
        when it holds the session's context or the tool frees sessions."""
        held = self._contexts.forget(session_id)
        if (held or self._releases) and self.alive:
            self._actor.release_session.remote(session_id)  # fire and forget: nobody waits for it

    def _on_death(self, _future: Any) -> None:
        self.alive = False  # from a Ray thread: the router reads it when it next takes this instance

    async def kill(self) -> None:
        """Kill the actor now (its running call fails, its object store values stay)."""
        import ray

        self.alive = False
        if self._actor is not None:
            ray.kill(self._actor, no_restart=True)
        if self._placed and self._placement is not None:
            self._placed = False
            self._placement.release()


def ray_factory(deployment: ToolDeployment, name: str) -> Callable[[], RayInstance]:
    """Makes the instances of one deployment, sharing its placement group when it asks for one."""
    placement = (
        _Placement(
            deployment.placement,
            (deployment.max_instances or deployment.instances) + deployment.standby_instances,
            deployment.num_cpus,
            deployment.num_gpus,
        )
        if deployment.placement is not None
        else None
    )

    def make() -> RayInstance:
        return RayInstance(
            deployment.tool,
            deployment.config,
            name,
            num_cpus=deployment.num_cpus,
            num_gpus=deployment.num_gpus,
            placement=placement,
        )

    return make
