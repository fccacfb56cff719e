"""Generalised advantage estimation (Schulman et al. 2016, eq. 16), time-major ``(T, B)``.

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - ended_t) * A_{t+1}
    returns = A + V

``ended_t``: the episode ended after step t (terminated or truncated), so no advantage
flows back across an episode boundary. ``next_values[t]`` is V of the observation that
followed step t in the same episode: V(s_{t+1}) inside an episode, V of the observation
after the rollout at its last step, and at a time-limit truncation V of the episode's
final observation (the rollout computes it with the episode's own memory before the
row is reset, ``rollout.py``). Truncation is not termination: it bootstraps from that
value; only ``terminated`` zeroes the bootstrap.
"""
from __future__ import annotations

import torch
from torch import Tensor


def next_values(values: Tensor, last: Tensor, ended: Tensor, final: Tensor) -> Tensor:
    """V(s_{t+1}) per step: ``values`` shifted by one, ``last`` (B,) after the rollout, and
    ``final`` (T, B) (V of an episode's final observation) where the episode ``ended``."""
    shifted = torch.cat([values[1:], last[None]], dim=0)
    return torch.where(ended, final, shifted)


def gae(rewards: Tensor, values: Tensor, next_values: Tensor, terminated: Tensor, ended: Tensor,
        gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Advantages and returns, both (T, B), from (T, B) rewards, values, next values and
    bool flags (``terminated`` implies ``ended``)."""
    shapes = {n: tuple(t.shape) for n, t in dict(rewards=rewards, values=values, next_values=next_values,
                                                  terminated=terminated, ended=ended).items()}
    if len(set(shapes.values())) != 1 or rewards.dim() != 2:
        raise ValueError(f"gae takes (T, B) tensors of one shape, got {shapes}")
    if bool((terminated & ~ended).any()):
        raise ValueError("a terminated step must also be an ended step (terminated implies ended)")
    for name, v in (("gamma", gamma), ("lam", lam)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {v!r}")
    delta = rewards + gamma * next_values * (~terminated) - values
    keep = gamma * lam * (~ended).to(values.dtype)
    adv = torch.zeros_like(values)
    running = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        running = delta[t] + keep[t] * running
        adv[t] = running
    return adv, adv + values
