"""The PPO update sees the policy that acted: replaying a rollout from its stored torso
state, with the row resets where episodes began, gives the rollout's log-probabilities
(ratio 1) at the first minibatch, for every torso, with episode ends inside the rollout."""
from __future__ import annotations

import pytest
import torch

from tfamily import members
from tfamily.rl.encoders import encoder_for
from tfamily.rl.envs import VecEnv
from tfamily.rl.policy import ActorCritic
from tfamily.rl.ppo import PPOSettings
from tfamily.rl.rollout import collect, minibatch
from tfamily.rl.task import RolloutSettings, RolloutTask
from tfamily.rl.toy import ID
from tfamily.rl.torso import build_torso

TORSOS = [m for m in ("transformer_xl", "gtrxl", "trxl_i") if m in members.REGISTRY] + ["lstm", "gru"]


def _policy(member, env, seed=0):
    torch.manual_seed(seed)
    torso = build_torso(member, d_model=16, n_layers=2, n_heads=2, mem_len=5)
    e = VecEnv(env, 1, 0)
    p = ActorCritic(encoder_for(e.observation_space, 16), torso, e.n_actions, PPOSettings(epochs=2, minibatches=2))
    e.close()
    return p


@pytest.mark.parametrize("member", TORSOS)
@pytest.mark.parametrize("env, seed", [(ID, 0), ("popgym-RepeatPreviousEasy-v0", 1)])
def test_first_minibatch_ratio_is_one(member, env, seed):
    policy = _policy(member, env, seed)
    task = RolloutTask(env, policy, RolloutSettings(n_envs=4, rollout=7), seed=seed)
    task.next()  # a first rollout, so the second starts from a carried, non-empty memory
    task.k = task.updates  # skip its updates: the next batch collects again
    batch = task.next()
    if env == ID:  # two-step episodes: ends inside the rollout, and mid-rollout resets
        assert task.rollout.ended[:-1].any() and task.rollout.starts[1:].any()
    for rows in ([1, 3], [2], [0, 1, 2, 3]):
        mb = minibatch(task.rollout, task.start_state, torch.tensor(rows), policy)
        with torch.no_grad():
            logits, _ = policy.replay(mb["obs"], mb["starts"], mb["state"], mb["trace"])
        logp = torch.log_softmax(logits, -1).gather(-1, mb["actions"][..., None])[..., 0]
        torch.testing.assert_close(logp, task.rollout.logp[:, rows], rtol=0, atol=2e-6)
    loss, m = policy.loss(batch)  # the task's own first minibatch
    assert m["ratio"] == pytest.approx(1.0, abs=1e-6)
    assert m["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    loss.backward()  # and the replay is differentiable end to end
    assert all(p.grad is not None for p in policy.pi.parameters())


@pytest.mark.parametrize("member", ["transformer_xl", "lstm"])
def test_replay_without_resets_differs(member):
    """The resets matter: replaying with none where episodes began changes the log-probs
    (so the ratio test above cannot pass by accident)."""
    policy = _policy(member, ID, 3)
    envs = VecEnv(ID, 4, 3)
    state = policy.new_state()
    rollout, start, _, _ = collect(policy, envs, state, torch.zeros(4, dtype=torch.bool), 6)
    assert rollout.starts.any()
    with torch.no_grad():
        logits, _ = policy.replay(rollout.obs, torch.zeros_like(rollout.starts), start, rollout.trace)
    logp = torch.log_softmax(logits, -1).gather(-1, rollout.actions[..., None])[..., 0]
    assert not torch.allclose(logp, rollout.logp, atol=1e-6)
