"""PPO's loss terms on a tiny rollout computed by hand."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.rl.ppo import PPOSettings, normalise, ppo_loss


def test_loss_terms_by_hand():
    # Three steps: ratios e^0.5 (clipped above at 1.2, A > 0), e^-0.5 (A < 0: clipped at 0.8 is the min), 1.
    old = torch.tensor([-1.0, -1.0, -2.0])
    logp = torch.tensor([-0.5, -1.5, -2.0])
    adv = torch.tensor([1.0, -2.0, 0.5])
    values, returns = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, 1.0, 0.0])
    entropy = torch.tensor([1.0, 0.5, 0.0])
    s = PPOSettings(clip=0.2, vf_coef=0.5, ent_coef=0.01)
    loss, m = ppo_loss(logp, old, adv, values, returns, entropy, s)
    r = [math.exp(0.5), math.exp(-0.5), 1.0]
    terms = [min(r[0] * 1.0, 1.2 * 1.0), min(r[1] * -2.0, 0.8 * -2.0), 0.5]
    policy = -sum(terms) / 3
    value = 0.5 * (1.0 + 0.0 + 4.0) / 3
    ent = 1.5 / 3
    assert m["policy_loss"] == pytest.approx(policy, rel=1e-6)
    assert m["value_loss"] == pytest.approx(value, rel=1e-6)
    assert m["entropy"] == pytest.approx(ent, rel=1e-6)
    assert m["clip_frac"] == pytest.approx(2 / 3)
    assert float(loss) == pytest.approx(policy + 0.5 * value - 0.01 * ent, rel=1e-6)


def test_gradient_is_zero_where_clipped():
    # A > 0 and ratio above 1 + eps: the clipped term is the min, so no policy gradient.
    logp = torch.tensor([0.5], requires_grad=True)
    loss, _ = ppo_loss(logp, torch.zeros(1), torch.ones(1), torch.zeros(1), torch.zeros(1), torch.zeros(1),
                       PPOSettings(clip=0.2, vf_coef=0.0, ent_coef=0.0))
    loss.backward()
    assert logp.grad.item() == 0.0
    logp = torch.tensor([0.1], requires_grad=True)  # inside the clip range: d(-r A)/dlogp = -r
    loss, _ = ppo_loss(logp, torch.zeros(1), torch.ones(1), torch.zeros(1), torch.zeros(1), torch.zeros(1),
                       PPOSettings(clip=0.2, vf_coef=0.0, ent_coef=0.0))
    loss.backward()
    assert logp.grad.item() == pytest.approx(-math.exp(0.1))


def test_normalise():
    a = torch.tensor([1.0, 2.0, 3.0, 6.0])
    n = normalise(a)
    assert float(n.mean()) == pytest.approx(0.0, abs=1e-7)
    assert float(n.std()) == pytest.approx(1.0, rel=1e-6)
    assert normalise(torch.tensor([3.0])).tolist() == [0.0]


@pytest.mark.parametrize("kw, match", [({"clip": -0.1}, "clip"), ({"epochs": 0}, "epochs"),
                                       ({"minibatches": 1.5}, "minibatches"), ({"gamma": 1.2}, "gamma")])
def test_settings_refuse_bad_values(kw, match):
    with pytest.raises((TypeError, ValueError), match=match):  # a wrong type is a TypeError
        PPOSettings(**kw)
