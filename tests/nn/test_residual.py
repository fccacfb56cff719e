"""The residual axis: post-norm LayerNorm(x + y) (Vaswani et al. 2017, section 5.4)
and pre-norm x + f(LayerNorm(x)) (Xiong et al. 2020)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tfamily.nn.residual import RESIDUALS, PostNorm, PreNorm


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


def test_dropout_acts_on_the_branch_only_in_training():
    r = PreNorm(8, dropout=0.5)
    x, y = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    assert not torch.allclose(r.post(x, y), x + y)
    r.eval()
    torch.testing.assert_close(r.post(x, y), x + y)


def test_registry_final_norm_flags():
    assert RESIDUALS["pre_norm"] is PreNorm and RESIDUALS.entry("pre_norm").info["final_norm"]
    assert RESIDUALS["post_norm"] is PostNorm and not RESIDUALS.entry("post_norm").info["final_norm"]
