"""Vectorised gymnasium environments whose position can be saved and restored exactly.

``VecEnv`` steps ``n`` environments of one id in lock step and resets a row as soon as
its episode ends (the row's next observation is the first of its next episode; the
final observation is kept for bootstrapping a truncated episode, ``gae.py``). Episode
e of row r starts from ``reset(seed=episode_seed(seed, stream, r, e))``, so a row's
whole state is (its episode count, the actions of its current episode): saving those
and replaying the actions restores every environment exactly, without pickling
environment objects (checkpoints never hold pickles). ``import popgym`` registers the
POPGym ids (``popgym-RepeatFirstEasy-v0``, ...) and ``toy.py`` its ``tfamily/RememberFirst-v0``.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from ..base.numbers import check_int

TRAIN, EVAL = 0, 1  # seed streams: evaluation episodes never repeat training ones


def registered() -> list[str]:
    import popgym  # noqa: F401  (registers the popgym-* ids with gymnasium)

    from .toy import register
    register()
    return sorted(gym.registry)


def check_env(env_id: str) -> gym.Env:
    """A new environment of ``env_id``, refusing ids that are not registered (naming close
    matches) and spaces the policy cannot act in."""
    if not isinstance(env_id, str):
        raise TypeError(f"env must be a gymnasium id string, got {env_id!r}")
    ids = registered()
    if env_id not in ids:
        close = difflib.get_close_matches(env_id, ids, n=5, cutoff=0.5)
        hint = f"close matches: {', '.join(close)}" if close else "e.g. popgym-RepeatFirstEasy-v0, CartPole-v1"
        raise ValueError(f"unknown environment id {env_id!r}; {hint}")
    if _mujoco_py(env_id):  # before make(), whose "out of date" warning would be a second line
        raise ValueError(missing_dependency(env_id, None))
    try:
        env = gym.make(env_id, disable_env_checker=True)
    except (gym.error.DependencyNotInstalled, ImportError) as e:  # a traceback from deep inside gymnasium
        raise ValueError(missing_dependency(env_id, e)) from None
    space = env.action_space
    if isinstance(space, gym.spaces.Box):
        env.close()
        raise ValueError(f"{env_id} has a continuous action space {space}: not supported yet "
                         f"(tfamily rl acts in Discrete action spaces)")
    if not isinstance(space, gym.spaces.Discrete):
        env.close()
        raise ValueError(f"{env_id} has action space {space}: not supported yet "
                         f"(tfamily rl acts in Discrete action spaces)")
    return env


# gymnasium's env folders -> (the package they need, the pip command of gymnasium's extra for it)
_EXTRAS = {"box2d": ("Box2D", 'pip install swig "gymnasium[box2d]"'),
           "mujoco": ("MuJoCo", 'pip install "gymnasium[mujoco]"'),
           "phys2d": ("jax", 'pip install "gymnasium[jax]"'), "tabular": ("jax", 'pip install "gymnasium[jax]"'),
           "functional": ("jax", 'pip install "gymnasium[jax]"'),
           "classic_control": ("pygame", 'pip install "gymnasium[classic-control]"'),
           "toy_text": ("pygame", 'pip install "gymnasium[toy-text]"')}


def _mujoco_py(env_id: str) -> bool:
    """Hopper-v3 and the other v2/v3 MuJoCo ids: registered to a function that raises."""
    entry = gym.spec(env_id).entry_point
    return callable(entry) and "mujoco_py" in entry.__name__


def missing_dependency(env_id: str, e: Exception | None) -> str:
    """One line naming ``env_id``, the package it lacks and the pip command that installs it."""
    entry = gym.spec(env_id).entry_point
    if _mujoco_py(env_id):
        base = env_id.rsplit("-v", 1)[0]
        return (f"environment {env_id!r} needs mujoco-py, which gymnasium no longer supports (its v2/v3 MuJoCo "
                f"ids moved to gymnasium-robotics); use {base}-v5 after pip install \"gymnasium[mujoco]\"")
    folder = next((f for f in _EXTRAS if f".envs.{f}." in str(entry)), None)
    if folder is not None:
        package, pip = _EXTRAS[folder]
    else:
        package = getattr(e, "name", None) or str(entry).split(".")[0].split(":")[0]
        pip = f"pip install {package}"
    return f"environment {env_id!r} needs {package}, which is not installed; {pip}"


def episode_seed(seed: int, stream: int, row: int, episode: int) -> int:
    return int(np.random.SeedSequence([seed, stream, row, episode]).generate_state(1)[0])


@dataclass
class Step:
    obs: list                 # the next observation of each row (the first of a new episode where one ended)
    reward: np.ndarray        # (n,) float64
    terminated: np.ndarray    # (n,) bool
    truncated: np.ndarray     # (n,) bool
    final_obs: list           # the last observation of the episode that ended, else the next observation
    finished: list            # (return, length) of the episodes that ended, in row order


class VecEnv:
    def __init__(self, env_id: str, n: int, seed: int, stream: int = TRAIN):
        check_int("the number of environments", n, 1)
        self.env_id, self.n, self.seed, self.stream = env_id, n, seed, stream
        self.envs = [check_env(env_id) for _ in range(n)]
        self.observation_space = self.envs[0].observation_space
        self.n_actions = int(self.envs[0].action_space.n)
        self.action_start = int(self.envs[0].action_space.start)
        self.episode = [0] * n
        self.actions: list[list[int]] = [[] for _ in range(n)]
        self.ret = [0.0] * n
        self.obs = [self._reset(r) for r in range(n)]

    def _reset(self, r: int):
        self.actions[r], self.ret[r] = [], 0.0
        obs, _ = self.envs[r].reset(seed=episode_seed(self.seed, self.stream, r, self.episode[r]))
        return obs

    def _step(self, r: int, a: int):
        obs, reward, terminated, truncated, _ = self.envs[r].step(a + self.action_start)
        self.actions[r].append(a)
        self.ret[r] += float(reward)
        return obs, float(reward), bool(terminated), bool(truncated)

    def step(self, actions) -> Step:
        """Act ``actions`` (n,) (0-based action indices) in every row."""
        actions = [int(a) for a in actions]
        if len(actions) != self.n:
            raise ValueError(f"got {len(actions)} actions for {self.n} environments")
        out = Step([], np.zeros(self.n), np.zeros(self.n, bool), np.zeros(self.n, bool), [], [])
        for r, a in enumerate(actions):
            obs, out.reward[r], out.terminated[r], out.truncated[r] = self._step(r, a)
            out.final_obs.append(obs)
            if out.terminated[r] or out.truncated[r]:
                out.finished.append((self.ret[r], len(self.actions[r])))
                self.episode[r] += 1
                obs = self._reset(r)
            out.obs.append(obs)
        self.obs = out.obs
        return out

    def state_dict(self) -> dict:
        """Each row's episode count and current episode's actions, as tensors."""
        lengths = [len(a) for a in self.actions]
        flat = [a for acts in self.actions for a in acts]
        return {"episode": torch.tensor(self.episode, dtype=torch.long),
                "lengths": torch.tensor(lengths, dtype=torch.long),
                "actions": torch.tensor(flat, dtype=torch.long)}

    def load_state_dict(self, state: dict) -> None:
        """Reset each row into its saved episode and replay its actions."""
        episode, lengths = state["episode"].tolist(), state["lengths"].tolist()
        if len(episode) != self.n:
            raise ValueError(f"saved environments have {len(episode)} rows, this run {self.n}")
        flat, at = state["actions"].tolist(), 0
        for r in range(self.n):
            self.episode[r] = episode[r]
            self.obs[r] = self._reset(r)
            for a in flat[at: at + lengths[r]]:
                self.obs[r], _, terminated, truncated = self._step(r, a)
                if terminated or truncated:
                    raise ValueError(f"replaying row {r} of {self.env_id} ended its episode early: the "
                                     f"environment is not deterministic given its reset seed")
            at += lengths[r]

    def close(self) -> None:
        for e in self.envs:
            e.close()
