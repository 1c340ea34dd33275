"""The token chooser of the hf policy on hand-built logits: what it samples from, what it records, and that
a row's draws come from its own seed alone."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from spacetools.agent.policies.generation import RowSampler  # noqa: E402


def test_a_draw_records_its_log_probability_and_entropy_and_never_a_suppressed_token() -> None:
    sampler = RowSampler([7], temperature=1.0, blocked=[3])
    scores = torch.tensor([[0.0, 0.0, -math.inf, 5.0]])  # token 3 blocked, token 2 impossible
    for _ in range(50):
        out = sampler(None, scores)
        assert int(out.argmax()) in (0, 1) and torch.isinf(out).sum() == 3  # greedy search keeps only it
    assert torch.stack(sampler.logprobs).flatten().tolist() == pytest.approx([math.log(0.5)] * 50)
    assert torch.stack(sampler.entropies).flatten().tolist() == pytest.approx([math.log(2)] * 50)


def test_temperature_divides_the_logits_and_zero_is_greedy() -> None:
    scores = torch.tensor([[0.0, math.log(3.0)]])  # probabilities 1/4, 3/4 at temperature 1
    hot = RowSampler([0], temperature=2.0, blocked=[])
    expected = torch.log_softmax(scores[0] / 2.0, dim=-1)  # sqrt(3) : 1 odds, not 3 : 1
    for _ in range(20):
        token = int(hot(None, scores).argmax())
        assert hot.logprobs[-1].item() == pytest.approx(expected[token].item())
    greedy = RowSampler([0], temperature=0.0, blocked=[0])
    assert greedy(None, scores)[0, 0] == -math.inf
    assert greedy.logprobs[-1].item() == pytest.approx(0.0)  # the only token left
    # Greedy turns record their tokens' log-probabilities under softmax(logits) too.
    plain = RowSampler([0], temperature=0.0, blocked=[])
    assert int(plain(None, scores).argmax()) == 1
    assert plain.logprobs[-1].item() == pytest.approx(math.log(0.75))


def test_a_row_draws_the_same_tokens_whatever_rows_share_its_batch() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    together = RowSampler([11, 22, 33], temperature=1.0, blocked=[])
    alone = RowSampler([22], temperature=1.0, blocked=[])
    for _ in range(20):
        picked = together(None, logits).argmax(-1)
        assert int(alone(None, logits[1:2]).argmax(-1)) == int(picked[1])
    # Each seed its own draws: 20 draws from 50 tokens coincide only by design.
    first, second = (RowSampler([seed], temperature=1.0, blocked=[]) for seed in (1, 2))
    draws = [
        (int(first(None, logits[:1]).argmax()), int(second(None, logits[:1]).argmax())) for _ in range(20)
    ]
    assert any(a != b for a, b in draws)
