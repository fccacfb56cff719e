"""A two-step memory task (remember the first observation, ``rl/toy.py``) learned by a
memory torso and by an LSTM: a policy without memory averages -0.5 there, one that
remembers averages 1. Slow (a few minutes each on 2 CPU cores)."""
from __future__ import annotations

import pytest

from tfamily import members
from tfamily.rl.toy import ID
from tfamily.rl.train import rl_config, train

MEMORY = "gtrxl" if "gtrxl" in members.REGISTRY else "transformer_xl"


@pytest.mark.slow
@pytest.mark.parametrize("member", [MEMORY, "lstm"])
def test_remember_first_is_learned(tmp_path, member):
    cfg = rl_config(ID, member, 40_960, seed=0, out=str(tmp_path / member), lr=1e-3,
                    torso={"d_model": 32, "n_layers": 1, "n_heads": 2, "mem_len": 4},
                    settings={"n_envs": 32, "rollout": 16, "eval_episodes": 64},
                    progress=False, tensorboard=False)
    result = train(cfg)
    assert result["train_mean_return"] > 0.8, result
    assert result["val_return"] > 0.8, result
