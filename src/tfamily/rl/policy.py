"""The actor-critic: observation encoder -> memory torso -> policy and value heads.

``step`` acts one environment step for every row and advances the torso's state (the
rollout). ``replay`` recomputes a stored rollout segment from the torso state it started
with, resetting rows at exactly the steps where their episodes began, so the PPO update
differentiates the same function that acted: at the first minibatch of the first epoch
the probability ratio is 1 (``tests/rl/test_policy.py``). An XL torso's memory from
before the rollout is detached (SG in Dai et al. eq. 1) and the rollout is one segment,
back-propagated within each step's window; an LSTM/GRU is back-propagated through the
whole segment.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..nn.state import State
from .ppo import PPOSettings, normalise, ppo_loss


class ActorCritic(nn.Module):
    def __init__(self, encoder: nn.Module, torso: nn.Module, n_actions: int, ppo: PPOSettings):
        super().__init__()
        d = torso.d_model
        self.encoder, self.torso, self.ppo = encoder, torso, ppo
        self.pi, self.v = nn.Linear(d, n_actions), nn.Linear(d, 1)
        # Small policy weights start near the uniform policy; unit-scale value head.
        nn.init.normal_(self.pi.weight, std=0.01)
        nn.init.zeros_(self.pi.bias)
        nn.init.normal_(self.v.weight, std=d ** -0.5)
        nn.init.zeros_(self.v.bias)

    def new_state(self) -> State:
        return self.torso.new_state()

    def step(self, obs: Tensor, state: State) -> tuple[Tensor, Tensor]:
        """One step of every row: ``obs`` (b, ...) -> logits (b, A), values (b,)."""
        h = self.torso(self.encoder(obs), state)
        return self.pi(h), self.v(h)[:, 0]

    def replay(self, obs: Tensor, starts: Tensor, state: State, trace: Tensor) -> tuple[Tensor, Tensor]:
        """``obs`` (T, b, ...), ``starts`` (T, b) bool (row's episode begins at step t), ``state``
        as before step 0 (consumed), ``trace`` (T, b, ...) from the rollout -> logits (T, b, A),
        values (T, b)."""
        h = self.torso.replay(self.encoder(obs), starts, state, trace)
        return self.pi(h), self.v(h)[..., 0]

    def loss(self, batch: dict) -> tuple[Tensor, dict]:
        """PPO's loss (``ppo.py``) on a minibatch of whole rollout rows (``rollout.minibatch``)."""
        logits, values = self.replay(batch["obs"], batch["starts"], batch["state"], batch["trace"])
        logp_all = F.log_softmax(logits.float(), dim=-1)
        logp = logp_all.gather(-1, batch["actions"][..., None])[..., 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        loss, metrics = ppo_loss(logp, batch["logp"], normalise(batch["adv"]), values.float(), batch["returns"],
                                 entropy, self.ppo)
        return loss, {**metrics, "tokens": batch["actions"].numel()}
