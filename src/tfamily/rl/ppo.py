"""The PPO objective (Schulman et al. 2017, eq. 7 and 9) on one minibatch.

    r_t = exp(logp_t - logp_old_t)
    L   = -E[min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)] + c_v * L_V - c_e * E[entropy_t]

The value loss L_V is the plain squared error 0.5 * (V(s_t) - R_t)^2 against the GAE
returns R = A + V_old (not the clipped variant of some implementations: the paper's
eq. 9 uses the squared error). Advantages are normalised per minibatch to zero mean and
unit variance before the clipped term (``normalise``), as the reference implementations
do; the loss itself takes them as given, so it can be checked by hand.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..base.numbers import check_int, check_number


@dataclass(frozen=True)
class PPOSettings:
    clip: float = 0.2          # eps of the clipped ratio
    vf_coef: float = 0.5       # c_v
    ent_coef: float = 0.01     # c_e
    epochs: int = 4            # passes over each rollout
    minibatches: int = 2       # per epoch, split by environment rows (whole sequences)
    gamma: float = 0.99
    lam: float = 0.95

    def __post_init__(self):
        for name in ("clip", "vf_coef", "ent_coef"):
            v = getattr(self, name)
            check_number(f"ppo {name}", v, 0.0, hint=f"e.g. --set {name}=0.01")
        for name in ("epochs", "minibatches"):
            v = getattr(self, name)
            check_int(f"ppo {name}", v, 1)
        for name in ("gamma", "lam"):
            v = getattr(self, name)
            check_number(f"ppo {name}", v, 0.0, 1.0)


def normalise(adv: Tensor, eps: float = 1e-8) -> Tensor:
    """Zero mean, unit variance (a single element is only centred)."""
    centred = adv - adv.mean()
    return centred / (centred.std() + eps) if adv.numel() > 1 else centred


def ppo_loss(logp: Tensor, old_logp: Tensor, adv: Tensor, values: Tensor, returns: Tensor, entropy: Tensor,
             settings: PPOSettings) -> tuple[Tensor, dict]:
    """The clipped loss over matching tensors of per-step terms; returns (loss, metrics)."""
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1.0 - settings.clip, 1.0 + settings.clip)
    policy = -torch.min(ratio * adv, clipped * adv).mean()
    value = 0.5 * (values - returns).pow(2).mean()
    ent = entropy.mean()
    loss = policy + settings.vf_coef * value - settings.ent_coef * ent
    with torch.no_grad():
        metrics = {"policy_loss": float(policy), "value_loss": float(value), "entropy": float(ent),
                   "ratio": float(ratio.mean()), "approx_kl": float((old_logp - logp).mean()),
                   "clip_frac": float(((ratio - 1.0).abs() > settings.clip).float().mean())}
    return loss, metrics
