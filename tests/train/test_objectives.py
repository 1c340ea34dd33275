"""GRPO's advantages, clipped loss and KL term on hand-built tensors, checked against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from spacetools.train.objectives import (
    group_advantages,
    grpo_loss,
    kl_low_variance,
    masked_mean,
    token_logprobs,
)


def test_advantages_are_normalised_within_each_group() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])  # two prompts, n = 4
    adv = group_advantages(rewards, group_size=4, eps=0.0)
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    assert adv[:4].tolist() == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std])
    assert adv[4:].tolist() == [0.0, 0.0, 0.0, 0.0]  # equal rewards teach nothing


def test_dr_grpo_advantages_are_centred_but_not_scaled() -> None:
    rewards = torch.tensor([0.501, 0.500, 0.499, 0.500])  # a dense reward, nearly equal
    assert group_advantages(rewards, group_size=4).abs().max() > 0.8  # std division blows 1e-3 up
    centred = group_advantages(rewards, group_size=4, scale=False)
    assert centred.tolist() == pytest.approx([0.001, 0.0, -0.001, 0.0], abs=1e-6)


def test_advantages_refuse_a_batch_that_is_not_whole_groups() -> None:
    with pytest.raises(ValueError, match="prompts"):
        group_advantages(torch.zeros(5), group_size=4)


def test_k3_kl_is_zero_for_equal_policies_and_matches_the_formula() -> None:
    logp = torch.tensor([[-1.0, -2.0]])
    assert kl_low_variance(logp, logp).tolist() == [[0.0, 0.0]]
    ref = torch.tensor([[-1.5, -1.0]])
    x = ref - logp
    assert kl_low_variance(logp, ref)[0].tolist() == pytest.approx((x.exp() - x - 1)[0].tolist())
    assert (kl_low_variance(logp, ref) >= 0).all()


def test_loss_counts_only_model_tokens() -> None:
    # One episode: tokens 0-1 are the prompt (mask 0), tokens 2-3 the model's answer (mask 1).
    mask = torch.tensor([[0, 0, 1, 1]])
    old = torch.full((1, 4), -1.0)
    logp = old.clone()
    logp[0, 0] = -50.0  # a wildly different prompt token must not matter
    out = grpo_loss(logp, old, None, torch.tensor([2.0]), mask)
    assert out.loss.item() == pytest.approx(-2.0)  # ratio 1 on model tokens: -A
    assert out.clip_fraction == 0.0


def test_ratio_is_clipped_on_the_side_the_advantage_pushes() -> None:
    mask = torch.ones(1, 1)
    old = torch.zeros(1, 1)
    up = torch.full((1, 1), math.log(1.5))  # ratio 1.5
    positive = grpo_loss(up, old, None, torch.tensor([1.0]), mask, clip_eps=0.2)
    assert positive.loss.item() == pytest.approx(-1.2)  # min(1.5, 1.2) * 1
    assert positive.clip_fraction == 1.0
    negative = grpo_loss(up, old, None, torch.tensor([-1.0]), mask, clip_eps=0.2)
    assert negative.loss.item() == pytest.approx(1.5)  # min(-1.5, -1.2) = -1.5: no clip against a bad move
    # The ratio is outside [0.8, 1.2], but min() kept the unclipped term: no clip was active.
    assert negative.clip_fraction == 0.0


def test_clip_fraction_counts_only_clips_active_for_the_advantages_sign() -> None:
    old = torch.zeros(1, 4)
    ratios = torch.tensor([[1.5, 0.5, 1.1, 0.9]])  # above, below, inside, inside
    logp = ratios.log()
    mask = torch.ones(1, 4)
    assert grpo_loss(logp, old, None, torch.tensor([1.0]), mask).clip_fraction == 0.25  # only the 1.5
    assert grpo_loss(logp, old, None, torch.tensor([-1.0]), mask).clip_fraction == 0.25  # only the 0.5
    assert grpo_loss(logp, old, None, torch.tensor([0.0]), mask).clip_fraction == 0.0


def test_kl_term_adds_its_coefficient_times_the_masked_mean() -> None:
    mask = torch.tensor([[1, 1, 0]])
    logp = torch.tensor([[-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-2.0, -1.0, -9.0]])
    out = grpo_loss(logp, logp.clone(), ref, torch.tensor([0.0]), mask, kl_coef=0.1)
    expected_kl = (math.exp(-1.0) - (-1.0) - 1.0 + 0.0) / 2
    assert out.kl == pytest.approx(expected_kl)
    assert out.loss.item() == pytest.approx(0.1 * expected_kl)


def test_gradient_flows_only_through_model_tokens() -> None:
    logp = torch.zeros(1, 3, requires_grad=True)
    grpo_loss(logp, torch.zeros(1, 3), None, torch.tensor([1.0]), torch.tensor([[0, 1, 0]])).loss.backward()
    assert logp.grad is not None
    assert logp.grad.tolist() == [[0.0, -1.0, 0.0]]


def test_token_logprobs_are_aligned_with_the_token_they_predict() -> None:
    logits = torch.zeros(1, 3, 4)
    logits[0, 0, 2] = 10.0  # position 0 predicts token 2 at position 1
    ids = torch.tensor([[1, 2, 3]])
    logp = token_logprobs(logits, ids)
    assert logp.shape == (1, 3)
    assert logp[0, 0].item() == 0.0
    assert logp[0, 1].item() == pytest.approx(torch.log_softmax(logits[0, 0], -1)[2].item())
    assert logp[0, 2].item() == pytest.approx(math.log(0.25))


def test_masked_mean_of_an_empty_mask_is_zero() -> None:
    assert masked_mean(torch.ones(2, 2), torch.zeros(2, 2)).item() == 0.0


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_chunked_scoring_of_model_tokens_equals_the_full_log_softmax(temperature: float) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from spacetools.train.episodes import Example, forward_logprobs

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 96, (23,))
    mask = torch.tensor([0] * 5 + [1] * 6 + [0] * 4 + [1] * 8)
    blocked = [3, 7]
    full_logits = model(input_ids=ids[None]).logits.index_fill(-1, torch.tensor(blocked), float("-inf"))
    full = token_logprobs(full_logits / temperature, ids[None]) * mask  # (1, T): the (T, V) way
    chunked = forward_logprobs(model, Example(ids, mask), "cpu", blocked, temperature=temperature, chunk=4)
    assert chunked.shape == (1, 23)
    assert torch.allclose(chunked, full, atol=1e-6)
    # The gradient through the recomputed chunks is the full computation's.
    full.sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    forward_logprobs(
        model, Example(ids, mask), "cpu", blocked, temperature=temperature, chunk=4
    ).sum().backward()
    assert all(
        torch.allclose(p.grad, g, atol=1e-6) for p, g in zip(model.parameters(), expected, strict=True)
    )
