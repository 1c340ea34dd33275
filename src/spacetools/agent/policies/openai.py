"""A policy backed by any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, a frontier API).

By default the model drives the same tag protocol as every other policy (``tool_mode="tags"``). The
episode's messages become chat messages with :func:`spacetools.agent.chat.to_chat_messages`: tool
responses go back as user messages carrying the ``<tool_response>`` text (how Qwen2.5's chat template
renders the ``tool`` role), consecutive ones merged into one message; images travel as base64 PNG data
URLs in ``image_url`` parts. Retries with exponential back-off on 429, 5xx, timeouts and connection
errors are the ``openai`` client's own.

``tool_mode="native"`` uses the API's function calling instead (:mod:`.native_tools`): the tools go in
the ``tools`` parameter and the replies' ``tool_calls`` are turned back into the project's calls.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any, Literal

import numpy as np
import openai

from spacetools.agent.chat import to_chat_messages
from spacetools.agent.policies.native_tools import NativeToolCalling
from spacetools.agent.types import EpisodeState, Policy
from spacetools.kit import imagecodec
from spacetools.kit.definition import ToolSpec


class _DataUrlCache:
    """PNG data URLs of the conversation images, encoded once per array instead of once per turn."""

    def __init__(self) -> None:
        self._urls: dict[int, str] = {}

    def get(self, image: np.ndarray) -> str:
        key = id(image)
        url = self._urls.get(key)
        if url is None:
            url = imagecodec.to_data_url(image)
            self._urls[key] = url
            # id() values are reused after an array dies, so forget the entry with the array.
            weakref.finalize(image, self._urls.pop, key, None)
        return url


class OpenAIPolicy(Policy):
    """Writes assistant turns with a chat-completions endpoint.

    Args:
        model: The model name the endpoint serves.
        base_url: The endpoint (e.g. ``http://127.0.0.1:8000/v1``); None means OpenAI's API.
        api_key_env: The environment variable holding the key. Local servers need none.
        temperature: Sampling temperature.
        max_tokens: Most tokens per assistant turn, unless the rollout gives a turn its own limit.
        timeout_s: Timeout of one request, in seconds.
        max_retries: Retries after a 429, a 5xx, a timeout or a dropped connection.
        extra_body: Extra JSON fields for the request (e.g. vLLM's ``top_k``).
        tool_mode: ``"tags"`` (the tag protocol in the text, what the released checkpoint speaks) or
            ``"native"`` (the API's function calling).
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        extra_body: dict[str, Any] | None = None,
        tool_mode: Literal["tags", "native"] = "tags",
    ) -> None:
        if not model:
            raise ValueError("OpenAIPolicy needs a model name")
        if max_tokens < 1 or timeout_s <= 0 or max_retries < 0:
            raise ValueError(
                f"bad limits: max_tokens={max_tokens}, timeout_s={timeout_s}, max_retries={max_retries}"
            )
        if tool_mode not in ("tags", "native"):
            raise ValueError(f"tool_mode must be 'tags' or 'native', got {tool_mode!r}")
        api_key = os.environ.get(api_key_env)
        if not api_key:
            if base_url is None:
                raise ValueError(f"set {api_key_env} to use the OpenAI API, or give a base_url")
            api_key = "EMPTY"  # self-hosted servers (vLLM, SGLang) accept any key
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self.tool_mode = tool_mode
        self._native: tuple[list[ToolSpec], NativeToolCalling] | None = None
        self._client_options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": base_url,
            "timeout": timeout_s,
            "max_retries": max_retries,
        }
        self._client: openai.AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self.usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self._image_urls = _DataUrlCache()

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The HTTP client of the running event loop, made on first use.

        Its pooled connections belong to one loop, so a policy reused under a new loop (each
        ``asyncio.run`` is one) gets a new client instead of failing with "Event loop is closed".
        """
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._client is None or (loop is not None and self._client_loop is not loop):
            self._client = openai.AsyncOpenAI(**self._client_options)
            self._client_loop = loop
        return self._client

    def chat_messages(self, state: EpisodeState) -> list[dict[str, Any]]:
        """The episode's messages in chat-completions form."""

        def image_part(index: int) -> dict[str, Any]:
            return {"type": "image_url", "image_url": {"url": self._image_urls.get(state.images[index])}}

        return to_chat_messages(state.messages, len(state.images), image_part, plain_text=True)

    def native_tool_calling(self, specs: list[ToolSpec]) -> NativeToolCalling:
        """The native-mode translation for these tool specs (made once per tool set)."""
        if self._native is None or self._native[0] != specs:
            self._native = (list(specs), NativeToolCalling(specs))
        return self._native[1]

    async def act(self, state: EpisodeState) -> str:
        """Ask the endpoint for the next assistant turn and return its text (tag protocol); the endpoint's
        count of the turn's tokens is added to ``state.model_tokens``."""
        if self.tool_mode == "native":
            native = self.native_tool_calling(state.tool_specs)
            messages = native.messages(state, lambda content: self._content(content, state))
            tools: dict[str, Any] = {"tools": native.tools} if native.tools else {}
        else:
            messages, tools = self.chat_messages(state), {}
        response = await self.client.chat.completions.create(
            model=self.model,
            messages=messages,  # type: ignore[arg-type]
            temperature=self.temperature,
            max_tokens=state.max_new_tokens or self.max_tokens,
            extra_body=self.extra_body or None,
            **tools,
        )
        self.usage["requests"] += 1
        if response.usage is not None:
            self.usage["prompt_tokens"] += response.usage.prompt_tokens
            self.usage["completion_tokens"] += response.usage.completion_tokens
            state.model_tokens += response.usage.completion_tokens
        if not response.choices:
            raise RuntimeError(f"the endpoint returned no choices for model {self.model!r}")
        message = response.choices[0].message
        if self.tool_mode == "native":
            return native.turn_text(message.content, message.tool_calls)
        return message.content or ""

    async def aclose(self) -> None:
        """Close the HTTP client and its connections; a later :meth:`act` opens a new one."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _content(
        self, content: str | list[dict[str, Any]], state: EpisodeState
    ) -> str | list[dict[str, Any]]:
        """One message's content in chat-completions form (native mode builds its messages itself)."""
        if isinstance(content, str):
            return content
        parts: list[dict[str, Any]] = []
        for part in content:
            if part.get("type") == "image":
                url = self._image_urls.get(state.images[part["index"]])
                parts.append({"type": "image_url", "image_url": {"url": url}})
            else:
                parts.append({"type": "text", "text": part.get("text", "")})
        return parts
