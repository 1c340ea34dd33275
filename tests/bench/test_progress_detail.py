"""The progress bar's detail: a local model's tokens and tokens per second, moving while an episode runs."""

from __future__ import annotations

import io

from rich.console import Console

from spacetools.bench.evaluate import token_rate
from spacetools.bench.progress import progress_bar


class CountingPolicy:
    """A policy's token counters as the `hf` policy reports them."""

    name = "counting"

    def __init__(self) -> None:
        self.counts = {"new_tokens": 100, "tokens_in_flight": 0}

    def stats(self) -> dict[str, int]:
        return dict(self.counts)


def test_the_detail_counts_tokens_written_since_the_start_including_a_running_call() -> None:
    policy = CountingPolicy()
    detail = token_rate(policy)  # type: ignore[arg-type]
    assert detail is not None and detail().startswith("0 tok, ")
    policy.counts["tokens_in_flight"] = 7  # mid-call: no turn has finished yet
    assert detail().startswith("7 tok, ")
    policy.counts.update(new_tokens=130, tokens_in_flight=0)
    assert detail().startswith("30 tok, ") and detail().endswith(" tok/s")
    assert token_rate(object()) is None  # type: ignore[arg-type]


def test_a_piped_bar_prints_the_detail_on_each_line() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with progress_bar(
        console, "episodes", 2, unit="ep", step_percent=50, detail=lambda: "42 tok, 2.5 tok/s"
    ) as advance:
        advance(1)
        advance(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(", 42 tok, 2.5 tok/s, elapsed " in line for line in lines)
