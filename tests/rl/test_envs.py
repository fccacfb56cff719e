"""Environments: clear refusals of bad input, exact save/restore by replay, encoders."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from tfamily.rl.encoders import encoder_for
from tfamily.rl.envs import VecEnv, check_env, episode_seed
from tfamily.rl.toy import ID
from tfamily.rl.train import rl_config


def test_unknown_env_id_lists_close_matches():
    with pytest.raises(ValueError, match="unknown environment id.*popgym-RepeatFirstEasy-v0"):
        check_env("popgym-RepeatFirstEasy-v9")
    with pytest.raises(TypeError, match="gymnasium id string"):
        check_env(3)


def test_continuous_actions_are_refused():
    with pytest.raises(ValueError, match="continuous action space.*not supported yet"):
        check_env("Pendulum-v1")


def test_too_few_steps_names_the_minimum():
    with pytest.raises(ValueError, match="fewer than one rollout.*use --steps >= 512"):
        rl_config(ID, "lstm", 100, settings={"n_envs": 8, "rollout": 64})
    with pytest.raises(ValueError, match="unknown rl setting"):
        rl_config(ID, "lstm", 10_000, settings={"n_env": 8})
    with pytest.raises(ValueError, match="n_envs must be an integer >= 1"):
        rl_config(ID, "lstm", 10_000, settings={"n_envs": 0})


@pytest.mark.parametrize("env_id", [ID, "popgym-RepeatPreviousEasy-v0", "popgym-CountRecallEasy-v0",
                                    "popgym-AutoencodeEasy-v0", "popgym-PositionOnlyCartPoleEasy-v0"])
def test_restore_by_replay_is_exact(env_id):
    rng = np.random.default_rng(0)
    a = VecEnv(env_id, 3, seed=5)
    for _ in range(60):
        a.step(rng.integers(a.n_actions, size=3))
    b = VecEnv(env_id, 3, seed=5)
    b.load_state_dict(a.state_dict())
    for _ in range(40):
        acts = rng.integers(a.n_actions, size=3)
        sa, sb = a.step(acts), b.step(acts)
        assert np.array_equal(sa.reward, sb.reward) and np.array_equal(sa.terminated, sb.terminated)
        assert str(sa.obs) == str(sb.obs) and sa.finished == sb.finished


def test_episode_seeds_are_distinct():
    seeds = {episode_seed(7, stream, row, ep) for stream in (0, 1) for row in range(8) for ep in range(50)}
    assert len(seeds) == 2 * 8 * 50


@pytest.mark.parametrize("space, obs, shape", [
    (gym.spaces.Discrete(5, start=2), [2, 6, 4], (3,)),
    (gym.spaces.MultiDiscrete([2, 3]), [np.array([1, 2]), np.array([0, 0])], (2, 2)),
    (gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(4))), [(1, 3), (0, 2)], (2, 2)),
    (gym.spaces.Box(-1, 1, (2, 3)), [np.zeros((2, 3)), np.ones((2, 3))], (2, 2, 3)),
])
def test_encoders(space, obs, shape):
    enc = encoder_for(space, 8)
    x = enc.batch(obs)
    assert tuple(x.shape) == shape
    y = enc(x)
    assert tuple(y.shape) == (len(obs), 8)
    assert tuple(enc(torch.stack([x, x])).shape) == (2, len(obs), 8)  # (T, B, ...) inputs too


def test_multidiscrete_is_a_linear_map_of_one_hots():
    enc = encoder_for(gym.spaces.MultiDiscrete([2, 3]), 4)
    x = enc.batch([np.array([1, 2])])
    want = enc.embed.weight[1] + enc.embed.weight[2 + 2]
    torch.testing.assert_close(enc(x)[0], want)


def test_unsupported_observation_space():
    with pytest.raises(TypeError, match="not supported"):
        encoder_for(gym.spaces.Text(5), 8)
