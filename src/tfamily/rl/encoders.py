"""Observation encoders: one environment observation space -> a ``(b, d_model)`` input.

Each encoder also batches raw observations from the environments (``batch``), so the
space is read in one place. Discrete: an embedding row per value. MultiDiscrete and a
Tuple of Discrete spaces: one embedding table per component, summed (the sum of
per-component embeddings is a linear map of the concatenated one-hots). Box: the
flattened values through one linear layer. Other spaces are refused by ``encoder_for``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn


class Encoder(Protocol):
    def batch(self, observations: Sequence) -> Tensor:
        """Raw observations of the environment rows -> one tensor (b, ...)."""

    def __call__(self, obs: Tensor) -> Tensor:
        """(b, ...) -> (b, d_model); ``obs`` may have extra leading dims (t, b, ...)."""


class DiscreteEncoder(nn.Module):
    def __init__(self, n: int, start: int, d_model: int):
        super().__init__()
        self.start = start
        self.embed = nn.Embedding(n, d_model)

    def batch(self, observations: Sequence) -> Tensor:
        return torch.as_tensor(np.asarray(observations, dtype=np.int64) - self.start)

    def forward(self, obs: Tensor) -> Tensor:
        return self.embed(obs)


class MultiDiscreteEncoder(nn.Module):
    """Components with ``sizes`` values each; one table of sum(sizes) rows, offset per component."""

    def __init__(self, sizes: Sequence[int], starts: Sequence[int], d_model: int):
        super().__init__()
        self.register_buffer("offsets", torch.as_tensor(np.cumsum([0, *sizes[:-1]]), dtype=torch.long),
                             persistent=False)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.embed = nn.Embedding(int(sum(sizes)), d_model)

    def batch(self, observations: Sequence) -> Tensor:
        rows = np.asarray([np.asarray(o, dtype=np.int64).reshape(-1) for o in observations]) - self.starts
        return torch.as_tensor(rows)

    def forward(self, obs: Tensor) -> Tensor:
        return self.embed(obs + self.offsets).sum(dim=-2)


class BoxEncoder(nn.Module):
    def __init__(self, shape: Sequence[int], d_model: int):
        super().__init__()
        self.shape = tuple(shape)
        self.proj = nn.Linear(math.prod(self.shape), d_model)

    def batch(self, observations: Sequence) -> Tensor:
        return torch.as_tensor(np.asarray(observations, dtype=np.float32).reshape(len(observations), *self.shape))

    def forward(self, obs: Tensor) -> Tensor:
        return self.proj(obs.flatten(-len(self.shape)))


def encoder_for(space: gym.Space, d_model: int) -> nn.Module:
    """The encoder of an observation ``space``; TypeError for a space it cannot read."""
    if isinstance(space, gym.spaces.Discrete):
        return DiscreteEncoder(int(space.n), int(space.start), d_model)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise TypeError(f"a MultiDiscrete observation space must be 1-D, got nvec of shape {space.nvec.shape}")
        return MultiDiscreteEncoder([int(n) for n in space.nvec], [int(s) for s in space.start], d_model)
    if isinstance(space, gym.spaces.Tuple) and all(isinstance(s, gym.spaces.Discrete) for s in space.spaces):
        return MultiDiscreteEncoder([int(s.n) for s in space.spaces], [int(s.start) for s in space.spaces], d_model)
    if isinstance(space, gym.spaces.Box):
        return BoxEncoder(space.shape, d_model)
    raise TypeError(f"observation space {space} is not supported; supported: Discrete, MultiDiscrete, "
                    f"Tuple of Discrete, Box")
