"""The heads axis: QKVProjection shapes for multi-head, grouped-query and
multi-query; SharedQKProjection keys are the unit-normalised queries."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tfamily.nn.heads import QKVProjection, SharedQKProjection


@pytest.mark.parametrize("n_kv", [8, 4, 2, 1])
def test_qkv_shapes_and_parameter_count(n_kv):
    p = QKVProjection(32, 8, n_kv, 4)
    x, src = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    assert p.q(x).shape == (2, 8, 5, 4)
    k, v = p.kv(src)
    assert k.shape == v.shape == (2, n_kv, 7, 4)
    # Fewer K/V heads means a proportionally smaller K/V projection (the point of GQA).
    assert p.qkv_proj.weight.shape == ((8 + 2 * n_kv) * 4, 32)


def test_heads_split_is_contiguous_per_head():
    p = QKVProjection(8, 2, 2, 4, bias=False)
    x = torch.randn(1, 3, 8)
    q = p.q(x)
    qkv = x @ p.qkv_proj.weight.t()  # rows: q (2 heads x 4), k (2 x 4), v (2 x 4)
    torch.testing.assert_close(q[0, 1], qkv[0, :, 4:8])
    k, v = p.kv(x)
    torch.testing.assert_close(k[0, 0], qkv[0, :, 8:12])
    torch.testing.assert_close(v[0, 1], qkv[0, :, 20:24])


@pytest.mark.parametrize("n_kv", [4, 2, 1])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fused_self_attention_path_equals_separate_q_and_kv(n_kv, seed):
    """``qkv(x, x)`` (one matmul) equals ``q(x)`` and ``kv(x)`` (the rows apart), in
    outputs and in the gradients of the weight and the input."""
    torch.manual_seed(seed)
    p = QKVProjection(16, 4, n_kv, 4)
    n = 1 + 5 * seed
    x1 = torch.randn(2, n, 16, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    fused, apart = p.qkv(x1, x1), (p.q(x2), *p.kv(x2))
    g = [torch.randn_like(t) for t in apart]
    for a, b in zip(fused, apart):
        torch.testing.assert_close(a, b)
    w1 = torch.autograd.grad(fused, [x1, p.qkv_proj.weight], g)
    w2 = torch.autograd.grad(apart, [x2, p.qkv_proj.weight], g)
    for a, b in zip(w1, w2):
        torch.testing.assert_close(a, b)


def test_old_checkpoints_with_separate_q_and_kv_weights_load():
    p = QKVProjection(16, 4, 2, 4)
    old = {"q_proj.weight": torch.randn(16, 16), "q_proj.bias": torch.randn(16),
           "kv_proj.weight": torch.randn(16, 16), "kv_proj.bias": torch.randn(16)}
    p.load_state_dict(old)
    x = torch.randn(1, 3, 16)
    torch.testing.assert_close(p.q(x).transpose(1, 2).flatten(2), x @ old["q_proj.weight"].t() + old["q_proj.bias"])
    k, v = p.kv(x)
    kv = x @ old["kv_proj.weight"].t() + old["kv_proj.bias"]
    torch.testing.assert_close(torch.cat([k, v], 1).transpose(1, 2).flatten(2), kv)


def test_shared_qk_keys_are_normalised_queries():
    p = SharedQKProjection(16, 4, 4, 4)
    x = torch.randn(2, 5, 16)
    k, v = p.kv(x)
    torch.testing.assert_close(k, F.normalize(p.q(x), dim=-1))
    torch.testing.assert_close(k.norm(dim=-1), torch.ones(2, 4, 5))
    assert v.shape == (2, 4, 5, 4)


def test_shared_qk_refuses_grouped_heads():
    with pytest.raises(ValueError, match="n_kv_heads=2"):
        SharedQKProjection(16, 4, 2, 4)
