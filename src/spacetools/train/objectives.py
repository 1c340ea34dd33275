"""The policy-gradient objectives of GRPO, on token-level tensors with their shapes spelled out.

Shapes: `B` episodes (a step's prompts times the group size `n`, each group's episodes consecutive), `T`
tokens per episode (right-padded), `V` the vocabulary. `mask (B, T)` is 1 on tokens the model wrote and 0
on everything else (system, user, tool responses, padding), so only the model's own tokens carry loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KL_CLAMP = 10.0  # the k3 estimator explodes when the policies drift far apart; verl clamps it the same way


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each token under the logits that predicted it.

    `logits (B, T, V)` from a forward pass over `ids (B, T)`; returns `(B, T)` where position 0 (which no
    logit predicts) is 0 and position t holds log p(ids[t] | ids[:t]).
    """
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
    picked = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    return torch.nn.functional.pad(picked, (1, 0))


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values (B, T)` over the tokens where `mask (B, T)` is 1 (0 when the mask is empty)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def group_advantages(
    rewards: torch.Tensor, group_size: int, eps: float = 1e-6, *, scale: bool = True
) -> torch.Tensor:
    """GRPO advantages A_i = (r_i - mean(r)) / (std(r) + eps) within each group of `group_size` episodes.

    `rewards (B,)` with B = prompts * group_size, groups consecutive; returns `(B,)`. A group whose
    rewards are all equal teaches nothing and gets advantage 0 everywhere. `scale=False` is Dr. GRPO's
    r_i - mean(r): with a dense reward, dividing by a tiny group std turns 1e-3 differences into ±0.87.
    """
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"expected (prompts * {group_size},) rewards, got shape {tuple(rewards.shape)}")
    if not rewards.numel():  # a step whose groups were all dropped
        return rewards.float()
    groups = rewards.float().view(-1, group_size)  # (prompts, n)
    mean = groups.mean(dim=1, keepdim=True)
    std = groups.std(dim=1, keepdim=True, unbiased=True) if group_size > 1 else torch.zeros_like(mean)
    centred = groups - mean
    if not scale:
        return centred.view(-1)
    return torch.where(std > 0, centred / (std + eps), torch.zeros_like(centred)).view(-1)


def kl_low_variance(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) by the low-variance estimator k3 = e^x - x - 1, x = ref - logp.

    Unbiased for the KL and never negative; `(B, T)` in, `(B, T)` out, clamped to [-10, 10].
    """
    log_ratio = (ref_logp - logp).clamp(-20.0, 20.0)
    return (log_ratio.exp() - log_ratio - 1.0).clamp(-KL_CLAMP, KL_CLAMP)


@dataclass(frozen=True)
class PolicyLoss:
    loss: torch.Tensor  # scalar, what `backward()` is called on
    policy_loss: float
    kl: float
    clip_fraction: float  # share of model tokens whose clip was active (no gradient for the advantage's sign)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
) -> PolicyLoss:
    """The clipped-ratio GRPO objective plus `kl_coef` times the KL to the reference, over model tokens.

    `logp`, `old_logp` (the log-probabilities the tokens were sampled with), `ref_logp` and `mask` are
    `(B, T)`; `advantages (B,)` is broadcast over each episode's tokens. Token-mean over the batch.
    """
    ratio = torch.exp(logp - old_logp)  # (B, T)
    adv = advantages.unsqueeze(1).to(logp.dtype)  # (B, 1)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv
    policy = masked_mean(-torch.minimum(unclipped, clipped), mask)
    kl = masked_mean(kl_low_variance(logp, ref_logp), mask) if ref_logp is not None else logp.new_zeros(())
    # A clip acts only where it takes the gradient away: above 1 + eps for a positive advantage, below
    # 1 - eps for a negative one (on the other side min() keeps the unclipped term).
    was_clipped = (((ratio > 1.0 + clip_eps) & (adv > 0)) | ((ratio < 1.0 - clip_eps) & (adv < 0))).to(
        logp.dtype
    )
    return PolicyLoss(
        loss=policy + kl_coef * kl,
        policy_loss=float(policy.detach()),
        kl=float(kl.detach()),
        clip_fraction=float(masked_mean(was_clipped, mask)),
    )
