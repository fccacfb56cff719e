"""The residual axis: post-norm LayerNorm(x + y) (Vaswani et al. 2017, section 5.4),
pre-norm x + f(LayerNorm(x)) (Xiong et al. 2020) and the identity-map reordering
x + ReLU(f(LayerNorm(x))) (TrXL-I, Parisotto et al. 2019); the gates are in test_gates.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tfamily.nn.residual import RESIDUALS, IdentityMap, PostNorm, PreNorm


def _ln(x):
    return F.layer_norm(x, x.shape[-1:])


def test_post_norm():
    r = PostNorm(8).eval()
    x, y = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    assert torch.equal(r.pre(x), x)
    torch.testing.assert_close(r.post(x, y), _ln(x + y))


def test_pre_norm_keeps_the_identity_path():
    r = PreNorm(8).eval()
    x, y = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    torch.testing.assert_close(r.pre(x), _ln(x))
    torch.testing.assert_close(r.post(x, y), x + y)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identity_map_reordering(seed):
    g = torch.Generator().manual_seed(seed)
    r = IdentityMap(8).eval()
    with torch.no_grad():
        r.norm.weight.copy_(torch.randn(8, generator=g))
        r.norm.bias.copy_(torch.randn(8, generator=g))
    x = torch.randn(2, 3, 8, generator=g, requires_grad=True)
    y = torch.randn(2, 3, 8, generator=g, requires_grad=True)
    torch.testing.assert_close(r.pre(x), F.layer_norm(x, (8,), r.norm.weight, r.norm.bias))
    out = r.post(x, y)
    torch.testing.assert_close(out, x + y.clamp(min=0))
    gx, gy = torch.autograd.grad(out.sum(), (x, y))
    torch.testing.assert_close(gx, torch.ones_like(x))  # the clean identity path
    torch.testing.assert_close(gy, (y > 0).float())
    torch.testing.assert_close(r.post(x, torch.zeros_like(x)), x)


def test_dropout_acts_on_the_branch_only_in_training():
    r = PreNorm(8, dropout=0.5)
    x, y = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    assert not torch.allclose(r.post(x, y), x + y)
    r.eval()
    torch.testing.assert_close(r.post(x, y), x + y)


def test_registry_final_norm_flags():
    assert RESIDUALS["pre_norm"] is PreNorm and RESIDUALS.entry("pre_norm").info["final_norm"]
    assert RESIDUALS["post_norm"] is PostNorm and not RESIDUALS.entry("post_norm").info["final_norm"]
    assert RESIDUALS["identity_map"] is IdentityMap and RESIDUALS.entry("identity_map").info["final_norm"]
