"""Referring expressions against a simulated scene: parse, then resolve to objects or free table space.

Understood phrases: object names and their words ("red mug", "mug", "small blue box", plurals),
superlatives ("the leftmost box", "the nearest ball"), a relation to an anchor ("the mug left of the
tray", "the ball in front of the box", "the cube next to the duck"), free space ("vacant space in
front of the box", "free spot on the table right of the mug") and free space for an object ("free
space left of the box where the mug can be placed", "a spot behind the tray to place the duck",
"space right of the box that fits the ball"). Sides are seen from the camera, on the table: "left of"
is towards the camera's left, "in front of" is nearer the camera, as in SpatialSim. The geometry
(sides, free space, fitting) is `spacetools.sim.freespace`, shared with the question generator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from spacetools.sim.freespace import best_placement, free_table, placement, vacant_region, vacant_ring
from spacetools.sim.masks import inside_distance
from spacetools.sim.observation import SIDES, Observation

RELATIONS = (*SIDES, "near")

# Relation phrases, most specific first; each maps to a canonical relation.
_RELATION_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?:to |on |at )?the left(?: hand)?(?: side)? of", "left of"),
    (r"left of", "left of"),
    (r"(?:to |on |at )?the right(?: hand)?(?: side)? of", "right of"),
    (r"right of", "right of"),
    (r"in front of", "in front of"),
    (r"closer to the camera than", "in front of"),
    (r"nearer to the camera than", "in front of"),
    (r"behind", "behind"),
    (r"in back of", "behind"),
    (r"at the back of", "behind"),
    (r"farther from the camera than", "behind"),
    (r"further from the camera than", "behind"),
    (r"next to", "near"),
    (r"close to", "near"),
    (r"beside", "near"),
    (r"near(?:by)?", "near"),
)
_RELATION_REGEX = re.compile(r"\b(" + "|".join(p for p, _ in _RELATION_PATTERNS) + r")\b")
# In free-space requests, what follows the anchor from here on names the object to place:
# "… the box where the mug can be placed", "… for the mug", "… to put the mug", "… that fits the mug".
_PLACEMENT_REGEX = re.compile(
    r"\b(?:where|for|that|which|to (?=place|put|set|fit|hold)|(?:(?:big|large|wide) )?enough)\b"
)

_FREE_SPACE_WORDS = frozenset(
    {"vacant", "free", "empty", "space", "spot", "area", "room", "unoccupied", "open"}
)
_SUPERLATIVES: dict[str, str] = {
    "leftmost": "leftmost",
    "rightmost": "rightmost",
    "nearest": "nearest",
    "closest": "nearest",
    "frontmost": "nearest",
    "farthest": "farthest",
    "furthest": "farthest",
    "backmost": "farthest",
    "largest": "largest",
    "biggest": "largest",
    "smallest": "smallest",
    "tiniest": "smallest",
    # Left-over side words are adjectives once relations are cut out: "the left mug".
    "left": "leftmost",
    "right": "rightmost",
    "front": "nearest",
    "back": "farthest",
    "rear": "farthest",
}
# Words that carry no identity: dropped before matching.
_FILLER = frozenset(
    [
        "the",
        "a",
        "an",
        "one",
        "some",
        "any",
        "all",
        "every",
        "each",
        "this",
        "that",
        "these",
        "those",
        "of",
        "to",
        "in",
        "on",
        "at",
        "and",
        "or",
        "with",
        "which",
        "who",
        "is",
        "are",
        "was",
        "be",
        "it",
        "its",
        "please",
        "point",
        "points",
        "pointing",
        "locate",
        "find",
        "show",
        "where",
        "could",
        "can",
        "would",
        "placing",
        "place",
        "placed",
        "put",
        "putting",
        "down",
        "suitable",
        "for",
        "object",
        "objects",
        "thing",
        "things",
        "item",
        "items",
        "image",
        "picture",
        "table",
        "camera",
        "located",
        "sitting",
        "standing",
        "lying",
        "there",
        "here",
        "other",
        "another",
        "instance",
        "instances",
        "from",
        "close",
        # Placement verbs and pronouns ("where I could put the mug", "that fits the ball").
        "fit",
        "fits",
        "hold",
        "holds",
        "go",
        "goes",
        "i",
        "we",
        "you",
        "will",
        "should",
        "enough",
    ]
)


@dataclass(frozen=True)
class Descriptor:
    """A noun phrase: content words that must all describe the object, and an optional superlative."""

    words: tuple[str, ...]
    superlative: str | None = None


@dataclass(frozen=True)
class Expression:
    """A parsed referring expression."""

    target: Descriptor
    free_space: bool
    relation: str | None = None
    anchor: Descriptor | None = None
    item: Descriptor | None = None
    """In a free-space request, the object that must fit there ("… where the mug can be placed")."""


@dataclass(frozen=True)
class Resolution:
    """Where an expression points: object indices best first, or a free-space mask."""

    objects: tuple[int, ...] = ()
    region: np.ndarray | None = None
    points: np.ndarray | None = None
    """Normalized ``(1, 2)`` point of the best spot found for an object's placement."""
    matched: bool = True
    """False when no object (or no anchor) matched the words: a model would be guessing."""


def _normalize(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower().replace("-", " ")).split())


def parse_descriptor(text: str) -> Descriptor:
    """Content words and superlative of a noun phrase."""
    words: list[str] = []
    superlative = None
    for word in _normalize(text).split():
        if word in _SUPERLATIVES:
            superlative = _SUPERLATIVES[word]
        elif word not in _FILLER and word not in _FREE_SPACE_WORDS:
            words.append(word)
    return Descriptor(tuple(words), superlative)


def parse_expression(text: str) -> Expression:
    """Split an expression into target, relation and anchor, and detect free-space requests."""
    normalized = _normalize(text)
    matches = list(_RELATION_REGEX.finditer(normalized))
    free_space = bool(_FREE_SPACE_WORDS & set(normalized.split()))
    if not matches:
        return Expression(parse_descriptor(normalized), free_space)
    canonical = [_canonical(match.group(1)) for match in matches]
    # "close to and in front of the box": the side, not "near", carries the meaning.
    chosen = next((i for i, rel in enumerate(canonical) if rel in SIDES), 0)
    head = normalized[: matches[0].start()]
    anchor_text = normalized[matches[chosen].end() :]
    free_space = free_space and not _FREE_SPACE_WORDS.isdisjoint(head.split())
    item = None
    connector = _PLACEMENT_REGEX.search(anchor_text) if free_space else None
    if connector is not None:
        words = parse_descriptor(anchor_text[connector.end() :])
        item = words if words.words else None  # "free space left of the box for placing": no object
        anchor_text = anchor_text[: connector.start()]
    return Expression(
        parse_descriptor(head), free_space, canonical[chosen], parse_descriptor(anchor_text), item
    )


def _canonical(phrase: str) -> str:
    for pattern, relation in _RELATION_PATTERNS:
        if re.fullmatch(pattern, phrase):
            return relation
    raise AssertionError(f"unmapped relation phrase {phrase!r}")  # the regex is built from the patterns


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "sses")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def object_vocabulary(observation: Observation, index: int) -> set[str]:
    """The words that may describe an object: its name, category, colour and size."""
    obj = observation.objects[index]
    words = set(_normalize(f"{obj.name} {obj.category} {obj.color or ''} {obj.size_label or ''}").split())
    if obj.size_label == "large":
        words |= {"big", "larger", "bigger"}
    if obj.size_label == "small":
        words |= {"little", "smaller", "tiny"}
    return words


def matching_objects(observation: Observation, descriptor: Descriptor) -> list[int]:
    """Indices of visible objects that every content word of the descriptor describes."""
    found = []
    for truth in observation.truths:
        if not truth.mask.any():
            continue
        vocabulary = object_vocabulary(observation, truth.index)
        if all(word in vocabulary or _singular(word) in vocabulary for word in descriptor.words):
            found.append(truth.index)
    return found


def best_partial_match(observation: Observation, descriptor: Descriptor) -> list[int]:
    """Visible objects sharing the most words with the descriptor (what a model would guess)."""
    scores = {}
    for truth in observation.truths:
        if truth.mask.any():
            vocabulary = object_vocabulary(observation, truth.index)
            scores[truth.index] = sum(w in vocabulary or _singular(w) in vocabulary for w in descriptor.words)
    top = max(scores.values(), default=0)
    return [index for index, score in scores.items() if score == top and top > 0]


def rank_by_relation(obs: Observation, candidates: list[int], relation: str, anchor: int) -> list[int]:
    """Candidates that stand in ``relation`` to ``anchor``, best first (an empty list when none does)."""
    anchor_centre = obs.centre(anchor)
    others = [c for c in candidates if c != anchor]
    if relation == "near":
        return sorted(others, key=lambda c: obs.footprint(c).distance(obs.footprint(anchor)))
    direction = obs.side_direction(relation)
    lateral = np.array([-direction[1], direction[0]])
    scored = []
    for candidate in others:
        offset = obs.centre(candidate) - anchor_centre
        along, across = float(offset @ direction), abs(float(offset @ lateral))
        if along > 0:
            scored.append((along - 0.5 * across, candidate))
    return [candidate for _, candidate in sorted(scored, reverse=True)]


def rank_by_superlative(obs: Observation, candidates: list[int], superlative: str) -> list[int]:
    """Candidates ordered by a superlative, best first."""

    def key(index: int) -> float:
        truth = obs.truths[index]
        if superlative in ("leftmost", "rightmost"):
            across = float(obs.centre(index) @ obs.right)
            return across if superlative == "leftmost" else -across
        if superlative in ("nearest", "farthest"):
            depth = float(truth.position_camera[2])
            return depth if superlative == "nearest" else -depth
        volume = float(np.prod(truth.extent))
        return -volume if superlative == "largest" else volume

    return sorted(candidates, key=key)


def free_space_region(obs: Observation, side: str | None, anchor: int | None) -> np.ndarray:
    """``(H, W)`` bool: bare table away from every object, beside ``anchor`` on ``side`` when given."""
    if anchor is not None and side is not None:
        return obs.region_mask(vacant_region(obs, anchor, side))
    if anchor is not None:  # "near": any side
        return obs.region_mask(vacant_ring(obs, anchor))
    return obs.region_mask(free_table(obs))


def placement_points(obs: Observation, item: int, anchor: int, side: str | None) -> np.ndarray:
    """Normalized ``(1, 2)`` image point of the best spot for ``item`` beside ``anchor``.

    Always a point, fitting or not: a real pointing model answers a spot, never "it does not fit".
    Without a side ("next to the box") the first side in `SIDES` order where it fits, else the first.
    """
    sides = SIDES if side is None else (side,)
    for candidate_side in sides:
        centre = placement(obs, item, anchor, candidate_side)
        if centre is not None:
            return obs.project(centre)[None]
    return obs.project(best_placement(obs, item, anchor, sides[0]))[None]


def _first_match(obs: Observation, descriptor: Descriptor, exclude: int | None = None) -> int | None:
    """The object a descriptor names (best by its superlative), never ``exclude``; None if none."""
    found = [i for i in matching_objects(obs, descriptor) if i != exclude]
    if descriptor.superlative:
        found = rank_by_superlative(obs, found, descriptor.superlative)
    return found[0] if found else None


def resolve(observation: Observation, expression: Expression, use_relations: bool = True) -> Resolution:
    """Resolve an expression in a scene. ``use_relations=False`` ignores relations and free space
    (a generic pointing model that only knows object names)."""
    anchor = None
    if use_relations and expression.relation is not None and expression.anchor is not None:
        anchor = _first_match(observation, expression.anchor)
        if anchor is None:
            return Resolution(matched=False)
    if expression.free_space and use_relations:
        side = expression.relation if expression.relation in SIDES else None
        if expression.item is None or anchor is None:
            return Resolution(region=free_space_region(observation, side, anchor))
        item = _first_match(observation, expression.item, exclude=anchor)
        if item is None:
            return Resolution(matched=False)
        return Resolution(points=placement_points(observation, item, anchor, side))
    candidates = matching_objects(observation, expression.target)
    if anchor is not None and expression.relation is not None:
        candidates = rank_by_relation(observation, candidates, expression.relation, anchor)
    if expression.target.superlative:
        candidates = rank_by_superlative(observation, candidates, expression.target.superlative)[:1]
    return Resolution(objects=tuple(candidates), matched=bool(candidates))


def interior_point(mask: np.ndarray) -> np.ndarray:
    """The normalized point deepest inside a mask (farthest from its border)."""
    height, width = mask.shape
    distance = inside_distance(mask)
    row, col = np.unravel_index(int(np.argmax(distance)), mask.shape)
    return np.array([(col + 0.5) / width, (row + 0.5) / height])


def spread_points(mask: np.ndarray, count: int) -> np.ndarray:
    """Up to ``count`` normalized points well inside a mask and far from each other."""
    height, width = mask.shape
    distance = inside_distance(mask)
    rows, cols = np.nonzero(distance >= 0.5 * distance.max())
    candidates = np.stack([(cols + 0.5) / width, (rows + 0.5) / height], axis=1)
    chosen = [interior_point(mask)]
    while len(chosen) < count and len(candidates):
        gaps = np.min(np.linalg.norm(candidates[:, None] - np.asarray(chosen)[None], axis=2), axis=1)
        if gaps.max() < 0.02:
            break
        chosen.append(candidates[int(np.argmax(gaps))])
    return np.asarray(chosen)
