"""The `Toolshed` facade and the `Session` call API.

A call goes: parse the arguments, find the tool method, resolve `"$name"` references against the
session's variables, validate, seed a per-call random generator, dispatch through the tool's router
(with only the images the call references), and store the result's variables and pictures in the
session. Every failure on that path is an error result. The Toolshed knows tools only by their
definition: per-image metadata (attachments) and deployment settings pass through it unread.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any

import numpy as np

from spacetools.kit.definition import (
    Tool,
    ToolContext,
    ToolMethod,
    ToolResult,
    ToolSpec,
    error_result,
    tool_methods,
)
from spacetools.kit.errors import ToolError, UnknownSessionError
from spacetools.toolshed.autoscale import Autoscaler, autoscaler_for
from spacetools.toolshed.backends import instance_factory, local_arguments
from spacetools.toolshed.batcher import Batcher, batchers_for
from spacetools.toolshed.call_arguments import (
    Arguments,
    call_seed,
    is_small,
    read_arguments,
    resolve_and_validate,
)
from spacetools.toolshed.deployment import ToolDeployment
from spacetools.toolshed.router import ToolRouter
from spacetools.toolshed.session import (
    SessionState,
    SessionStore,
    check_attachment,
    check_image,
    check_session_inputs,
)
from spacetools.toolshed.toolsets import get_toolset

__all__ = ["Session", "Toolshed"]


#: The longest expired sessions wait to be swept (a quarter of the time to live when that is shorter).
MAX_SWEEP_INTERVAL_S = 30.0


class Session:
    """One episode's view of the Toolshed: its images, its variables and the calls it makes."""

    def __init__(self, shed: Toolshed, state: SessionState) -> None:
        self._shed = shed
        self._state = state

    @property
    def id(self) -> str:
        """The session id."""
        return self._state.id

    @property
    def seed(self) -> int:
        """The session seed (part of every call's random seed)."""
        return self._state.seed

    @property
    def images(self) -> list[np.ndarray]:
        """The conversation's images, addressed by `image_index`."""
        return self._state.images

    @property
    def attachments(self) -> list[dict[str, Any]]:
        """The metadata attached to each image (an empty dict when none)."""
        return self._state.attachments

    @property
    def variables(self) -> Mapping[str, Any]:
        """The variables held now, by name (a read-only view)."""
        return MappingProxyType({name: entry[0] for name, entry in self._state.variables.items()})

    @property
    def closed(self) -> bool:
        """True once the session was released or expired."""
        return self._state.closed

    async def open(self) -> str:
        """The session id; `UnknownSessionError` when the session is closed or expired (a session here
        opens with `Toolshed.open_session`; a remote one opens on the server by this call)."""
        return self._shed._store.get(self._state.id).id

    def add_image(self, image: np.ndarray, attachment: dict[str, Any] | None = None) -> int:
        """Append an image to the conversation; returns its `image_index`.

        Pictures that tools return are added by the session itself (see `ToolResult.image_indices`).
        """
        return self._shed._append_image(self._state, image, attachment)

    def set_variable(self, name: str, value: Any) -> bool:
        """Store a variable as a tool would; False when it exceeds the memory limit and was not kept."""
        return not self._shed._store.store(self._state, {name: value})

    async def call(self, name: str, arguments: Arguments = None) -> ToolResult:
        """Call a tool method; failures come back as error results, never as exceptions."""
        return await self._shed._call(self._state, name, arguments)

    async def call_many(self, calls: Sequence[tuple[str, Arguments]]) -> list[ToolResult]:
        """Run the calls of one turn in parallel; results in call order."""
        if len(calls) == 1:  # most turns make one call: no task to gather
            return [await self.call(*calls[0])]
        return list(await asyncio.gather(*(self.call(name, arguments) for name, arguments in calls)))

    def close(self) -> None:
        """Release the session and its variables."""
        self._shed._store.release(self._state.id)


class Toolshed:
    """Serves a set of tools to many sessions at once."""

    def __init__(
        self,
        deployments: Sequence[ToolDeployment] | str,
        *,
        seed: int = 0,
        max_session_bytes: int = 512 * 2**20,
        max_total_bytes: int = 4 * 2**30,
        session_ttl_s: float = 3600.0,
        max_sessions: int | None = None,
        max_queue_wait_s: float | None = None,
    ) -> None:
        """
        Args:
            deployments: The tools and how to run them, or a tool set's name (`toolsets.TOOLSETS`);
                a simulated tool's realism is its deployment's setting (`toolsets.with_profile`).
            max_session_bytes: Images and variables one session may hold.
            max_total_bytes: Images and variables all sessions together may hold.
            session_ttl_s: Idle time after which a session expires.
            max_sessions: Open sessions at once (`TooManySessionsError` past it); None: no cap.
            max_queue_wait_s: Longest a call waits for a free instance before it is answered with a
                timeout error; None: as long as it takes (each call still has its tool's timeout).
        """
        if isinstance(deployments, str):
            deployments = get_toolset(deployments)
        if not deployments:
            raise ValueError("a Toolshed needs at least one tool deployment")
        self.seed = seed
        self._profiles: set[str] = set()
        self._store = SessionStore(
            max_session_bytes,
            max_total_bytes,
            session_ttl_s,
            max_sessions=max_sessions,
            on_close=self._release_tool_sessions,
        )
        self._max_queue_wait_s = max_queue_wait_s
        self._routers: dict[str, ToolRouter] = {}
        self._methods: dict[str, tuple[ToolRouter, ToolMethod]] = {}
        self._batchers: dict[str, Batcher] = {}
        self._autoscalers: dict[str, Autoscaler] = {}
        self._unknown_calls = 0
        self._started = False
        self._sweeper: asyncio.Task[None] | None = None
        for deployment in deployments:
            self._add(deployment)

    def _add(self, deployment: ToolDeployment) -> None:
        tool_class = _checked_tool_class(deployment)
        if tool_class.name in self._routers:
            raise ValueError(f"tool {tool_class.name!r} is deployed twice")
        if "profile" in deployment.config:
            self._profiles.add(str(deployment.config["profile"]))
        make_instance = instance_factory(deployment, tool_class.name)
        router = ToolRouter(
            tool_class.name,
            make_instance,
            deployment.instances,
            deployment.timeout_s,
            deployment.backend,
            max_queue_wait_s=self._max_queue_wait_s,
            standby=deployment.standby_instances,
        )
        self._routers[tool_class.name] = router
        for method in tool_methods(tool_class).values():
            self._methods[method.name] = (router, method)
        self._batchers.update(batchers_for(deployment, router))
        autoscaler = autoscaler_for(deployment, router)
        if autoscaler is not None:
            self._autoscalers[tool_class.name] = autoscaler

    async def start(self) -> None:
        """Start every tool's instances (in parallel); on failure, stop what started and raise."""
        outcomes = await asyncio.gather(*(r.start() for r in self._routers.values()), return_exceptions=True)
        failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failures:
            await self.close()
            raise failures[0]
        for autoscaler in self._autoscalers.values():
            autoscaler.start()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_expired())
        self._started = True

    async def close(self) -> None:
        """Stop every instance and release every session."""
        self._started = False
        if self._sweeper is not None:
            self._sweeper.cancel()
        await asyncio.gather(*(autoscaler.close() for autoscaler in self._autoscalers.values()))
        await asyncio.gather(*(router.close() for router in self._routers.values()))
        self._store.release_all()

    async def _sweep_expired(self) -> None:
        """Expire idle sessions on a timer, so that what they hold here and in the tools is freed even
        when no request comes to do it."""
        interval = min(self._store.ttl_s / 4, MAX_SWEEP_INTERVAL_S)
        while True:
            await asyncio.sleep(interval)
            self._store.sweep()

    async def __aenter__(self) -> Toolshed:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def profile(self) -> str | None:
        """The realism profile its deployments set (`config["profile"]`); None when none or several."""
        return next(iter(self._profiles)) if len(self._profiles) == 1 else None

    def specs(self) -> list[ToolSpec]:
        """The specs of every tool method served, in deployment order."""
        return [method.spec for _router, method in self._methods.values()]

    def router(self, tool_name: str) -> ToolRouter:
        """The router of one tool (its instances and statistics)."""
        return self._routers[tool_name]

    def method_router(self, name: str) -> ToolRouter | None:
        """The router serving the tool method `name` (``"tool.method"``); None for an unknown name."""
        entry = self._methods.get(name)
        return None if entry is None else entry[0]

    def open_session(
        self,
        images: Sequence[np.ndarray],
        attachments: Sequence[dict[str, Any] | None] | None = None,
        seed: int | None = None,
    ) -> Session:
        """Open a session for one episode.

        `attachments` holds one metadata dict per image (passed to the tools unread; the simulated
        tools read a scene under ``"scene"``); `seed` (default 0) enters every call's random seed.
        """
        images, checked = check_session_inputs(images, attachments)
        return Session(self, self._store.create(images, checked, 0 if seed is None else seed))

    def session(self, session_id: str) -> Session:
        """An open session by id; `UnknownSessionError` (a `KeyError`) when it is closed or expired."""
        return Session(self, self._store.get(session_id))

    def stats(self) -> dict[str, Any]:
        """Live statistics: per tool, plus sessions and variable memory."""
        tools = {name: router.snapshot() for name, router in self._routers.items()}
        for name, autoscaler in self._autoscalers.items():
            tools[name]["autoscale"] = autoscaler.snapshot()
        for batcher in self._batchers.values():
            tools[batcher.router.name].setdefault("batching", []).append(batcher.snapshot())
        return {
            "tools": tools,
            "sessions": {
                "open": len(self._store),
                "expired": self._store.expired,
                "variable_bytes": self._store.total_bytes - self._store.image_bytes,
                "image_bytes": self._store.image_bytes,
                "evictions": self._store.evictions,
            },
            "unknown_tool_calls": self._unknown_calls,
        }

    async def _call(self, state: SessionState, name: str, arguments: Arguments) -> ToolResult:
        if not self._started:
            raise RuntimeError(
                "the Toolshed is not started: use `async with Toolshed(...)` or `await start()`"
            )
        started_at = time.perf_counter()
        entry = self._methods.get(name)
        if entry is None:
            self._unknown_calls += 1
            return ToolResult.error(_unknown_tool_message(name, list(self._methods)))
        router, method = entry
        try:
            state = self._store.get(state.id)
            # Reading and walking the arguments costs time in their size: unless they are small, it
            # runs off the event loop, so that one hostile call cannot stall the others (or `/health`).
            # The session's variables are looked up here, on the loop that owns the store.
            small = is_small(arguments)
            raw, referenced = (
                read_arguments(name, arguments)
                if small
                else await asyncio.to_thread(read_arguments, name, arguments)
            )
            values = {variable: self._store.lookup(state, variable) for variable in referenced}
            head = [self.seed, state.seed, name]
            kwargs, identity = (
                resolve_and_validate(method, raw, values, head)
                if small and (not values or is_small(values))
                else await asyncio.to_thread(resolve_and_validate, method, raw, values, head)
            )
            ctx = ToolContext(
                session_id=state.id,
                images={
                    i: state.images[i] for i in method.referenced_images(kwargs) if i < len(state.images)
                },
                image_sizes=list(state.image_sizes),
                attachments=list(state.attachments),
                rng=call_seed(state, identity),
            )
            if values or not small:  # only variables, or arguments of other types, hold cluster arrays
                kwargs = local_arguments(router.backend, kwargs)
        # Exception: whatever else the model's arguments provoke (an integer too long to write, say)
        # is the model's error to read, not the server's.
        except Exception as exc:
            result = ToolResult.error(str(exc)) if isinstance(exc, ToolError) else error_result(exc)
            router.stats.record(result, time.perf_counter() - started_at)
            return result
        result = await self._batchers.get(name, router).call(name, kwargs, ctx)
        if result.images or result.image_indices:
            self._keep_images(state, result)
        if result.variables:
            dropped = self._store.store(state, result.variables)
            if dropped:
                names = ", ".join(f"${variable}" for variable in dropped)
                result.text += f"\n(Note: {names} could not be kept within the session memory limit.)"
        return result

    def _keep_images(self, state: SessionState, result: ToolResult) -> None:
        """Add the pictures a tool made to the conversation, where they are made (no client round trip),
        each with the attachment the tool gave it (so that later calls can work on it)."""
        kept: list[int] = []
        attachments = result.attachments if len(result.attachments) == len(result.images) else []
        for position, image in enumerate(result.images):
            attachment = attachments[position] if attachments else None
            try:
                kept.append(self._append_image(state, image, attachment))
            # A bad picture, one over the memory limit, or the session closed while the tool ran.
            except (ValueError, UnknownSessionError) as exc:
                result.text += f"\n(Note: a picture the tool made was not kept: {exc})"
        result.image_indices = kept

    def _append_image(self, state: SessionState, image: np.ndarray, attachment: dict[str, Any] | None) -> int:
        """Add one image to a session, counted in its memory; returns its `image_index`."""
        index = len(state.images)
        check_image(image, index)
        self._store.add_images(state, [image], [check_attachment(attachment, index)])
        return index

    def _release_tool_sessions(self, session_id: str) -> None:
        """A session closed or expired: the tools that hold state per session free it, and instances
        in other processes drop the session's context."""
        for router in self._routers.values():
            router.release_session(session_id)


def _checked_tool_class(deployment: ToolDeployment) -> type[Tool]:
    """The deployment's tool class, its settings checked here (a bad one fails once, not in every
    instance)."""
    tool_class = deployment.tool_class()
    tool_class.check_config(deployment.config)
    unknown = sorted(set(deployment.config) - tool_class.config_keys)
    if tool_class.config_keys and unknown:  # a tool that names its settings takes no others
        raise ValueError(
            f"tool {tool_class.name!r} has no setting {', '.join(unknown)} "
            f"(its settings: {', '.join(sorted(tool_class.config_keys))})"
        )
    return tool_class


def _unknown_tool_message(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown tool {name!r}.{hint} Available tools: {', '.join(known)}"
