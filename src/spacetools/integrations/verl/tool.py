"""`ToolshedTool`: a verl `BaseTool` that runs one Toolshed tool method on a running Toolshed server.

verl builds one `ToolshedTool` per tool method from the exported tool config (:mod:`.export`), each
with the server's ``url``. Tools live in the server, outside the trainer's processes; the adapter holds
the episode's Toolshed session so variables (``"$point_cloud"``) carry from one call to the next:

- ``create`` makes an instance and records its ``create_kwargs`` (``attachments``: each image's metadata
  for the tools, such as ``{"scene": <scene spec JSON>}`` for a simulated task, ``seed``, and ``images``
  as data URLs when verl passes none);
- ``execute`` opens the episode's session on the server, or joins it: every tool of one trajectory
  shares one session. verl 0.9 creates and releases an instance around every call, so the trajectory
  (verl's ``agent_data``, its ``request_id``) holds the session too, until verl drops it; without
  ``agent_data`` the instance id names the episode;
- ``release`` lets the instance go; the session closes when nothing holds it any more (and the server's
  session time to live reclaims a session whose release was lost).

Tool failures come back as the tool's error text, never as exceptions, as in the project's rollout.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import numpy as np

from spacetools.kit import imagecodec
from spacetools.toolshed.client import RemoteSession, RemoteToolshed

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
except ImportError:  # only verl's workers build these tools; the module still imports for export and docs
    VERL_AVAILABLE = False

    class BaseTool:  # type: ignore[no-redef]
        """Stands in for verl's base class so that this module imports without verl."""

        def __init__(self, config: dict[str, Any], tool_schema: Any) -> None:
            raise ImportError(
                "ToolshedTool runs inside verl: install verl (e.g. `make test-verl` builds one)"
            )

    OpenAIFunctionToolSchema = ToolResponse = None
else:
    VERL_AVAILABLE = True

__all__ = ["VERL_AVAILABLE", "ToolshedTool"]


@dataclass
class _Episode:
    session: RemoteSession
    holders: int = 0


@dataclass
class _Instance:
    create_kwargs: dict[str, Any]
    episode_key: str | None = None


@dataclass
class _Server:
    """The sessions of the episodes in flight against one Toolshed server, in one event loop."""

    shed: RemoteToolshed
    episodes: dict[str, _Episode] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def hold(self, key: str) -> None:
        self.episodes[key].holders += 1

    def let_go(self, key: str) -> None:
        episode = self.episodes.get(key)
        if episode is None:
            return
        episode.holders -= 1
        if episode.holders <= 0:
            del self.episodes[key]
            episode.session.close()


# One client per server and event loop: verl's agent-loop workers each run their own loop.
_SERVERS: dict[tuple[str, int], _Server] = {}


async def _server(url: str, timeout_s: float) -> _Server:
    key = (url, id(asyncio.get_running_loop()))
    server = _SERVERS.get(key)
    if server is None:
        shed = RemoteToolshed(url, timeout_s=timeout_s)
        await shed.start()
        server = _SERVERS.setdefault(key, _Server(shed))
        if server.shed is not shed:
            await shed.close()
    return server


class ToolshedTool(BaseTool):
    """One Toolshed tool method as a verl tool.

    Config (the tool config YAML's ``config``): ``url`` of the Toolshed server (``spacetools serve``),
    ``timeout_s`` of one call (default 300), ``show_tool_images`` (default false: like the project's
    rollout, images a tool made are recorded in the server, not shown to the policy).
    """

    def __init__(self, config: dict[str, Any], tool_schema: Any) -> None:
        super().__init__(config, tool_schema)
        if not config.get("url"):
            raise ValueError(f"the config of tool {self.name!r} needs the Toolshed server's `url`")
        self.url = str(config["url"])
        self.timeout_s = float(config.get("timeout_s", 300.0))
        self.show_tool_images = bool(config.get("show_tool_images", False))
        self._instances: dict[str, _Instance] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, Any]:
        """A new instance; ``create_kwargs`` (verl 0.9) or the keyword arguments are its episode's inputs."""
        instance_id = instance_id or str(uuid4())
        create_kwargs = kwargs.get("create_kwargs")
        self._instances[instance_id] = _Instance(dict(create_kwargs if create_kwargs is not None else kwargs))
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[Any, float, dict[str, Any]]:
        """Call the tool method in the episode's session; the tool's text (and images, if shown)."""
        instance = self._instances.get(instance_id)
        if instance is None:
            return ToolResponse(text=f"Error: no tool instance {instance_id}; create one first."), 0.0, {}
        agent_data = kwargs.get("agent_data")
        try:
            server = await _server(self.url, self.timeout_s)
            session = await self._join(server, instance, instance_id, agent_data)
        except Exception as exc:  # the server is down or refused the inputs: tell the model, keep training
            return ToolResponse(text=f"Error: the Toolshed is unavailable: {exc}"), 0.0, {"is_error": True}
        started = time.perf_counter()
        result = await session.call(self.name, parameters)
        metrics = {"is_error": result.is_error, "latency_s": time.perf_counter() - started}
        images = [_to_pil(image) for image in result.images] if self.show_tool_images else []
        response = ToolResponse(text=result.text, image=images) if images else ToolResponse(text=result.text)
        return response, 0.0, metrics

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Let the instance go; its episode's session closes when nothing else holds it."""
        instance = self._instances.pop(instance_id, None)
        if instance is None or instance.episode_key is None:
            return
        server = _SERVERS.get((self.url, id(asyncio.get_running_loop())))
        if server is not None:
            server.let_go(instance.episode_key)

    async def _join(
        self, server: _Server, instance: _Instance, instance_id: str, agent_data: Any
    ) -> RemoteSession:
        """The episode's session (opened on first use); the instance holds it from now on."""
        request_id = getattr(agent_data, "request_id", None)
        key = str(request_id) if request_id else str(instance.create_kwargs.get("episode_id", instance_id))
        async with server.lock:
            episode = server.episodes.get(key)
            if episode is None:
                images = _episode_images(agent_data, instance.create_kwargs)
                attachments = instance.create_kwargs.get("attachments")
                seed = instance.create_kwargs.get("seed")
                session = server.shed.open_session(images, list(attachments) if attachments else None, seed)
                await session.open()
                episode = server.episodes[key] = _Episode(session)
                if agent_data is not None:
                    # The trajectory holds its session until verl drops it.
                    server.hold(key)
                    weakref.finalize(agent_data, server.let_go, key)
            if instance.episode_key is None:
                instance.episode_key = key
                server.hold(key)
        if agent_data is not None:
            # Images verl added to the conversation since (those tools returned) get the same indices here.
            for image in _agent_images(agent_data, start=len(episode.session.images)):
                episode.session.add_image(image)
        return episode.session


def _agent_images(agent_data: Any, start: int = 0) -> list[np.ndarray]:
    """verl's conversation images (PIL images) from ``start`` on, as RGB arrays."""
    images = getattr(agent_data, "image_data", None) or []
    if not isinstance(images, list):
        images = [images]
    return [
        np.asarray(image.convert("RGB") if hasattr(image, "convert") else image, dtype=np.uint8)
        for image in images[start:]
    ]


def _episode_images(agent_data: Any, create_kwargs: dict[str, Any]) -> list[np.ndarray]:
    if agent_data is not None:
        return _agent_images(agent_data)
    return [imagecodec.decode(image) for image in create_kwargs.get("images", [])]


def _to_pil(image: np.ndarray) -> Any:
    from PIL import Image

    return Image.fromarray(image, "RGB")
