"""Rollouts: T steps of every environment row under the current policy, with what PPO
needs to replay them (``policy.ActorCritic.replay``) and to score them (``gae.py``).

Row r's memory is reset before step t exactly when ``starts[t, r]`` (its episode began
with that observation); ``state`` is the torso state before step 0 and before those
first resets, so replaying from it with ``starts`` repeats the rollout's computation.
A time-limit truncation bootstraps from V of the episode's final observation, computed
by one extra step of a copy of the row's state (its own memory, not reset).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor

from ..nn.state import State
from .envs import VecEnv
from .gae import gae, next_values
from .policy import ActorCritic
from .torso import clone_state


@dataclass
class Rollout:
    obs: Tensor           # (T, B, ...) encoder input
    actions: Tensor       # (T, B) long
    logp: Tensor          # (T, B) log pi_old(a_t | history)
    values: Tensor        # (T, B) V_old
    rewards: Tensor       # (T, B)
    terminated: Tensor    # (T, B) bool: the episode ended after step t for good
    ended: Tensor         # (T, B) bool: terminated or truncated after step t
    starts: Tensor        # (T, B) bool: the row's memory is reset before step t
    trace: Tensor         # (T, B, ...) what the torso's replay needs of each step
    final_values: Tensor  # (T, B) V(final observation) where truncated, else 0
    last_value: Tensor    # (B,) V(observation after the rollout)
    adv: Tensor           # (T, B) GAE advantages
    returns: Tensor       # (T, B) adv + values

    def tensors(self, prefix: str) -> dict:
        return {f"{prefix}{f.name}": getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_tensors(cls, state: dict, prefix: str) -> Rollout:
        return cls(**{f.name: state[f"{prefix}{f.name}"] for f in fields(cls)})


def sample(logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
    return torch.multinomial(F.softmax(logits.float(), dim=-1), 1, generator=generator)[:, 0]


@torch.no_grad()
def collect(policy: ActorCritic, envs: VecEnv, state: State, starts: Tensor, steps: int,
            generator: torch.Generator | None = None) -> tuple[Rollout, State, Tensor, list]:
    """Run ``steps`` steps in ``envs`` from ``state`` (advanced in place) with pending row
    resets ``starts`` (B,). Returns the rollout, the state it started from, the resets
    pending after it, and the (return, length) of each episode that ended in it."""
    start_state = clone_state(policy.torso, state)
    enc, gamma, lam = policy.encoder, policy.ppo.gamma, policy.ppo.lam
    obs_t, act_t, logp_t, val_t, rew_t, term_t, end_t, start_t, final_t, trace_t, finished = ([] for _ in range(11))
    obs = enc.batch(envs.obs)
    for _ in range(steps):
        state.reset(starts)
        logits, value = policy.step(obs, state)
        trace_t.append(policy.torso.trace(state))
        action = sample(logits, generator)
        out = envs.step(action.tolist())
        truncated = torch.as_tensor(out.truncated & ~out.terminated)
        final = torch.zeros_like(value)
        if bool(truncated.any()):  # V of the final observation, with the episode's own memory
            final = torch.where(truncated, policy.step(enc.batch(out.final_obs), clone_state(policy.torso, state))[1],
                                final)
        obs_t.append(obs)
        act_t.append(action)
        logp_t.append(F.log_softmax(logits.float(), -1).gather(-1, action[:, None])[:, 0])
        val_t.append(value.float())
        rew_t.append(torch.as_tensor(out.reward, dtype=torch.float32))
        term_t.append(torch.as_tensor(out.terminated))
        start_t.append(starts)
        starts = torch.as_tensor(out.terminated | out.truncated)
        end_t.append(starts)
        final_t.append(final.float())
        finished.extend(out.finished)
        obs = enc.batch(out.obs)
    after = clone_state(policy.torso, state)
    after.reset(starts)
    last = policy.step(obs, after)[1].float()
    values, ended, terminated = torch.stack(val_t), torch.stack(end_t), torch.stack(term_t)
    rewards = torch.stack(rew_t)
    adv, returns = gae(rewards, values, next_values(values, last, ended, torch.stack(final_t)), terminated, ended,
                       gamma, lam)
    rollout = Rollout(torch.stack(obs_t), torch.stack(act_t), torch.stack(logp_t), values, rewards, terminated,
                      ended, torch.stack(start_t), torch.stack(trace_t), torch.stack(final_t), last, adv, returns)
    return rollout, start_state, starts, finished


def minibatch(rollout: Rollout, start_state: State, rows: Tensor, policy: ActorCritic) -> dict:
    """The batch ``ActorCritic.loss`` takes: environment rows ``rows`` of the rollout, whole
    sequences, with their slice of the starting state."""
    state = clone_state(policy.torso, start_state)
    state.reorder(rows)
    return {"obs": rollout.obs[:, rows], "starts": rollout.starts[:, rows], "actions": rollout.actions[:, rows],
            "logp": rollout.logp[:, rows], "adv": rollout.adv[:, rows], "returns": rollout.returns[:, rows],
            "trace": rollout.trace[:, rows], "state": state}
