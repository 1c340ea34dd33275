"""`spacetools demo`: the main job."""


def demo() -> None:
    """Run the main job end to end."""
    raise SystemExit("demo: not built yet")
