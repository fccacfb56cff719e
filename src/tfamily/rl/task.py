"""The rollout ``Task`` (``train/task.py``): PPO on the shared training loop.

One optimiser step of the loop is one PPO minibatch. ``next`` collects a rollout of
``rollout`` steps in ``n_envs`` environments when the previous one has been used for
``epochs`` x ``minibatches`` updates, then hands out its minibatches (environment rows,
whole sequences, a fresh row permutation per epoch drawn from (seed, rollout, epoch)).
``size`` counts environment steps, once per rollout, so the loop's throughput and
``tokens`` are environment steps. The task's position holds the environments (episode
counts and current actions, replayed on restore), the live torso state, the pending row
resets and, in the middle of a rollout, the rollout and the state it started from, so a
run killed anywhere resumes bitwise. Evaluation plays ``eval_episodes`` episodes in
environments seeded apart from training's, sampling with a generator of its own (the
training RNG is untouched); its loss is PPO's loss on those rollouts, its metric the
mean episode return.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch

from .envs import EVAL, TRAIN, VecEnv
from .policy import ActorCritic
from .rollout import Rollout, collect, minibatch
from ..base.numbers import check_int


@dataclass(frozen=True)
class RolloutSettings:
    n_envs: int = 32
    rollout: int = 64           # steps per environment per rollout
    eval_episodes: int = 32

    def __post_init__(self):
        for name, v in asdict(self).items():
            check_int(name, v, 1)

    @property
    def steps(self) -> int:
        return self.n_envs * self.rollout


def _prefixed(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def episodes(policy: ActorCritic, env_id: str, *, n_envs: int, steps: int, seed: int, count: int,
             max_steps: int) -> Iterator[tuple[Rollout, object, list]]:
    """Rollouts in evaluation environments until ``count`` episodes ended (or ``max_steps``
    environment steps were taken): yields (rollout, its starting state, episodes ended)."""
    envs = VecEnv(env_id, n_envs, seed, stream=EVAL)
    g = torch.Generator().manual_seed(seed)
    state, starts, done, taken = policy.new_state(), torch.zeros(n_envs, dtype=torch.bool), 0, 0
    try:
        while done < count and taken < max_steps:
            rollout, start, starts, finished = collect(policy, envs, state, starts, steps, generator=g)
            done, taken = done + len(finished), taken + steps * n_envs
            yield rollout, start, finished
    finally:
        envs.close()


class RolloutTask:
    kind, unit, vocab, vocab_size, carries_state = "rl", "env_steps", None, 0, False
    report_fields = ("mean_return", "episodes")

    def __init__(self, env_id: str, policy: ActorCritic, settings: RolloutSettings, *, seed: int = 0):
        ppo = policy.ppo
        if settings.n_envs < ppo.minibatches:
            raise ValueError(f"n_envs={settings.n_envs} environment rows cannot make {ppo.minibatches} "
                             f"minibatches; use n_envs >= minibatches")
        self.name, self.policy, self.settings, self.seed = env_id, policy, settings, seed
        self.seq_len, self.updates = settings.rollout, ppo.epochs * ppo.minibatches
        self.envs = VecEnv(env_id, settings.n_envs, seed, stream=TRAIN)
        self.state = policy.new_state()
        self.starts = torch.zeros(settings.n_envs, dtype=torch.bool)
        self.rollout: Rollout | None = None
        self.start_state = None
        self.rollouts, self.k, self.episodes, self.mean_return = 0, 0, 0, None
        self.eval_stats: dict = {}

    # -- training batches ---------------------------------------------------------------------
    def next(self) -> dict:
        fresh = self.rollout is None or self.k == self.updates
        if fresh:
            self.policy.eval()  # no layer may behave differently between acting and replaying
            try:
                self.rollout, self.start_state, self.starts, finished = collect(
                    self.policy, self.envs, self.state, self.starts, self.settings.rollout)
            finally:
                self.policy.train()
            self.rollouts, self.k = self.rollouts + 1, 0
            if finished:  # POPGym's metric is over batch-mean episode returns (Morad et al. 2023)
                self.episodes += len(finished)
                self.mean_return = sum(r for r, _ in finished) / len(finished)
        epoch, m = divmod(self.k, self.policy.ppo.minibatches)
        g = torch.Generator().manual_seed(((self.seed * 1_000_003 + self.rollouts) << 8) + epoch)
        rows = torch.randperm(self.settings.n_envs, generator=g).tensor_split(self.policy.ppo.minibatches)[m]
        self.k += 1
        return {**minibatch(self.rollout, self.start_state, rows, self.policy),
                "env_steps": self.settings.steps if fresh else 0}

    def size(self, batch: dict) -> int:
        return batch["env_steps"]

    def carry(self, state) -> None:
        """The torso state lives in the task (it acts between updates); nothing is carried."""

    def report(self) -> dict:
        return {"mean_return": self.mean_return, "episodes": self.episodes}

    # -- position -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        out = {"type": "rl", "env": self.name, "n_envs": self.settings.n_envs, "seed": self.seed,
               "rollouts": self.rollouts, "k": self.k, "episodes": self.episodes, "mean_return": self.mean_return,
               "starts": self.starts.clone(), **{f"env.{k}": v for k, v in self.envs.state_dict().items()},
               **{f"torso.{k}": v for k, v in self.state.state_dict().items()}}
        if self.rollout is not None:
            out.update(self.rollout.tensors("rollout."))
            out.update({f"start.{k}": v for k, v in self.start_state.state_dict().items()})
        return out

    def load_state_dict(self, state: dict) -> None:
        want = {"type": "rl", "env": self.name, "n_envs": self.settings.n_envs, "seed": self.seed}
        diffs = [f"{k}: saved {state.get(k)!r}, here {v!r}" for k, v in want.items() if state.get(k) != v]
        if diffs:
            raise ValueError(f"the checkpoint's rollout position does not fit this run ({'; '.join(diffs)})")
        self.rollouts, self.k, self.episodes = int(state["rollouts"]), int(state["k"]), int(state["episodes"])
        self.mean_return = state["mean_return"]
        self.starts = state["starts"].bool()
        self.envs.load_state_dict(_prefixed(state, "env."))
        self.state = self.policy.new_state()
        self.state.load_state_dict(_prefixed(state, "torso."))
        if "rollout.obs" in state:
            self.rollout = Rollout.from_tensors(state, "rollout.")
            self.start_state = self.policy.new_state()
            self.start_state.load_state_dict(_prefixed(state, "start."))
        else:
            self.rollout = self.start_state = None

    # -- evaluation ---------------------------------------------------------------------------
    def eval_size(self, max_units: int | None) -> int:
        return min(max_units or 10**9, 200 * self.settings.eval_episodes)

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        returns = []
        for rollout, start, finished in episodes(
                self.policy, self.name, n_envs=self.settings.n_envs, steps=self.settings.rollout, seed=self.seed,
                count=self.settings.eval_episodes, max_steps=max_units or 100_000):
            returns.extend(r for r, _ in finished)
            yield minibatch(rollout, start, torch.arange(self.settings.n_envs), self.policy)
        returns = returns[: self.settings.eval_episodes]
        self.eval_stats = {"return": sum(returns) / len(returns) if returns else math.nan, "episodes": len(returns)}

    def eval_metrics(self, loss: float) -> dict:
        return dict(self.eval_stats)

    def close(self) -> None:
        self.envs.close()
