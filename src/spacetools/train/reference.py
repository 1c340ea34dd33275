"""The KL reference of a `last_layers:k` stage without a second model or a second pass over frozen layers.

With `trainable: last_layers:k` every layer below the last k, and the output head, never change: the
reference differs from the policy only in the last k decoder layers and the final norm. So the reference
keeps frozen copies of just those (their starting weights), and takes the hidden states that enter the
first trained layer from the policy's own forward pass (with the attention mask and position embeddings
the model built for them): the frozen layers are computed once, for both.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch

from spacetools.kit.trainable import decoder_layers, decoder_norm


class LastLayersReference:
    """The starting weights of `source`'s last `count` decoder layers and final norm, run on the hidden
    states the policy's forward passes to its first trained layer (captured inside `capture()`)."""

    def __init__(self, policy: Any, source: Any, count: int) -> None:
        _, layers = decoder_layers(policy)
        _, start = decoder_layers(source)
        self.entry = layers[len(layers) - count]  # where the policy's hidden states are taken
        self.layers = copy.deepcopy(start[len(start) - count :]).requires_grad_(False)
        self.norm = copy.deepcopy(decoder_norm(source) or torch.nn.Identity()).requires_grad_(False)
        self.head = policy.get_output_embeddings()  # frozen: the same weights in both
        self._inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Within it, each policy forward leaves the inputs of its first trained layer for `hidden()`."""

        def keep(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self._inputs = (args, kwargs)

        handle = self.entry.register_forward_pre_hook(keep, with_kwargs=True)
        try:
            yield
        finally:
            handle.remove()

    @torch.no_grad()
    def hidden(self) -> torch.Tensor:
        """`(T, H)` the reference's last hidden states (after the norm) for the last captured forward."""
        if self._inputs is None:
            raise RuntimeError("no policy forward was captured: call the policy inside capture()")
        args, kwargs = self._inputs
        hidden = (args[0] if args else kwargs["hidden_states"]).detach()
        # The policy's cache must not see the reference's keys and values (they would be appended to it).
        rest = {
            key: value
            for key, value in kwargs.items()
            if key not in ("hidden_states", "past_key_values", "past_key_value", "cache")
        }
        for layer in self.layers:
            out = layer(hidden, *args[1:], **{**rest, "use_cache": False})
            hidden = out[0] if isinstance(out, tuple) else out
        self._inputs = None
        last: torch.Tensor = self.norm(hidden)[0]
        return last
