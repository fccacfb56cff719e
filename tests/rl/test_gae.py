"""GAE against a hand-written per-row loop, with episode ends and time-limit truncation."""
from __future__ import annotations

import pytest
import torch

from tfamily.rl.gae import gae, next_values


def _by_hand(rewards, values, last, terminated, truncated, final, gamma, lam):
    T, B = rewards.shape
    adv = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        a = 0.0
        for t in reversed(range(T)):
            if terminated[t, b]:
                v_next = 0.0
            elif truncated[t, b]:
                v_next = float(final[t, b])
            else:
                v_next = float(values[t + 1, b]) if t + 1 < T else float(last[b])
            delta = float(rewards[t, b]) + gamma * v_next - float(values[t, b])
            ended = bool(terminated[t, b] or truncated[t, b])
            a = delta + (0.0 if ended else gamma * lam * a)
            adv[t, b] = a
    return adv


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("T", [1, 5, 17])
def test_gae_matches_loop(seed, T):
    g = torch.Generator().manual_seed(seed)
    B = 4
    rewards, values = torch.randn(T, B, generator=g, dtype=torch.float64), torch.randn(T, B, generator=g,
                                                                                       dtype=torch.float64)
    last, final = torch.randn(B, generator=g, dtype=torch.float64), torch.randn(T, B, generator=g, dtype=torch.float64)
    u = torch.rand(T, B, generator=g)
    terminated, truncated = u < 0.2, (u >= 0.2) & (u < 0.35)
    ended = terminated | truncated
    assert ended.any() or T == 1
    final = torch.where(truncated, final, torch.zeros_like(final))
    adv, ret = gae(rewards, values, next_values(values, last, ended, final), terminated, ended, 0.97, 0.9)
    want = _by_hand(rewards, values, last, terminated, truncated, final, 0.97, 0.9)
    torch.testing.assert_close(adv, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ret, want + values, rtol=1e-12, atol=1e-12)


def test_truncation_bootstraps_termination_does_not():
    # One step, reward 1, V(s) = 0: terminated gives A = 1; truncated with V(final) = 2 gives 1 + gamma * 2.
    r, v = torch.ones(1, 2), torch.zeros(1, 2)
    term, ended = torch.tensor([[True, False]]), torch.tensor([[True, True]])
    nv = next_values(v, torch.full((2,), 5.0), ended, torch.tensor([[2.0, 2.0]]))
    adv, _ = gae(r, v, nv, term, ended, 0.5, 1.0)
    assert adv.tolist() == [[1.0, 2.0]]


def test_gae_refuses_bad_input():
    z = torch.zeros(3, 2)
    f = torch.zeros(3, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="one shape"):
        gae(z, z, torch.zeros(3, 3), f, f, 0.9, 0.9)
    with pytest.raises(ValueError, match="terminated implies ended"):
        gae(z, z, z, ~f, f, 0.9, 0.9)
    with pytest.raises(ValueError, match="lam"):
        gae(z, z, z, f, f, 0.9, 1.5)
