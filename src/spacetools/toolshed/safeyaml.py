"""YAML for every config file the project reads (tool-set configs, training configs), bounded.

``yaml.safe_load`` builds no objects, but it still recurses once per nesting level (10,000 levels raise
a ``RecursionError``) and shares an anchored node among its aliases, so a 300-byte "billion laughs"
block loads quickly and then explodes in whatever walks it (validation, a JSON dump). Here the document
is composed with a depth limit, its size with every alias expanded is counted (each node once, so the
count itself is cheap), and only then is it built.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 100
"""Nesting levels of a config (ours use fewer than ten)."""
MAX_NODES = 100_000
"""Values of a config with every alias expanded (ours have a few hundred)."""


class YamlError(ValueError):
    """A config file that is not YAML, or a YAML document too deep or too large once expanded."""


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """The safe loader, refusing a document nested deeper than ``MAX_DEPTH`` as soon as its scanner or
    composer reaches that depth (the scanner reads a whole flow collection ahead of the composer)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise YamlError(f"nested deeper than {MAX_DEPTH} levels")
        super().fetch_flow_collection_start(token_class)

    def add_indent(self, column: int) -> bool:
        if len(self.indents) >= MAX_DEPTH:
            raise YamlError(f"nested deeper than {MAX_DEPTH} levels")
        return bool(super().add_indent(column))

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise YamlError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded_size(root: yaml.Node) -> int:
    """How many values the document holds once every alias is expanded (aliases share node objects)."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise YamlError("an alias refers to a node that contains it")
        if depth > MAX_DEPTH:  # aliases can nest anchored nodes deeper than the text does
            raise YamlError(f"nested deeper than {MAX_DEPTH} levels once its aliases are expanded")
        in_progress.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item, depth + 1) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        in_progress.discard(key)
        if total > MAX_NODES:
            raise YamlError(f"more than {MAX_NODES} values once its aliases are expanded")
        sizes[key] = total
        return total

    return size(root, 1)


def load_yaml(text: str, source: str) -> Any:
    """The value of one YAML document, or a one-line ``YamlError`` naming ``source`` and the problem."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    except YamlError as error:
        raise YamlError(f"{source}: refused: {error}") from None
    except yaml.YAMLError as error:
        raise YamlError(f"{source}: not valid YAML: {' '.join(str(error).split())}") from None
    finally:
        loader.dispose()
