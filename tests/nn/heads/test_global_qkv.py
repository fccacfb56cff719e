"""Longformer's global tokens (Beltagy et al. 2020, section 3.1): without them the window alone; a
global query sees every key through its own projections; a windowed query sees its window and the
global keys, and nothing else; at a longer length the layer equals a dense reference without
allocating anything n x n."""
from __future__ import annotations

import pytest
import torch
from einops import rearrange
from torch.utils._python_dispatch import TorchDispatchMode

from tfamily.build import build
from tfamily.nn.attention import Attention
from tfamily.nn.heads import QKVProjection
from tfamily.nn.heads.global_qkv import GlobalTokenAttention
from tfamily.nn.kernels import BlockSparseKernel, ReferenceKernel
from tfamily.nn.patterns import Full, SlidingWindow, dense_mask
from tfamily.spec import Spec


def _model():
    torch.manual_seed(0)
    spec = Spec.from_dict(dict(member="lf", model="encoder", vocab_size=30, d_model=16, dropout=0.0,
                               pattern={"name": "sliding_window", "params": {"window": 2, "causal": False}},
                               position={"name": "learned", "max_len": 40}, heads={"n_heads": 2, "global_qkv": True},
                               depth={"n_layers": 1}, residual={"name": "post_norm"},
                               objective={"name": "masked_lm", "params": {"mask_id": 29}}))
    return build(spec).eval()


def test_reach_of_global_and_windowed_queries():
    model = _model()
    attn = model.stack.blocks[0].attn
    x = torch.randn(1, 20, 16)
    glob = torch.zeros(1, 20, dtype=torch.bool)
    glob[0, 3] = True
    with torch.no_grad():
        assert torch.equal(attn(x, global_tokens=torch.zeros_like(glob)), attn.local(x))
        y = attn(x, global_tokens=glob)
        x2 = x.clone()
        x2[0, 15] += 1.0  # far from 3 and from 8; inside 14..16's window
        y2 = attn(x2, global_tokens=glob)
        x3 = x.clone()
        x3[0, 3] += 1.0  # the global token: every query sees it
        y3 = attn(x3, global_tokens=glob)
    changed = (y2 - y).abs().amax(-1)[0] > 0
    assert changed.nonzero().flatten().tolist() == [3, 14, 15, 16]
    assert bool(((y3 - y).abs().amax(-1) > 0).all())


def test_global_tokens_need_a_bool_mask_of_the_input_shape():
    attn = _model().stack.blocks[0].attn
    with pytest.raises(ValueError, match=r"global_tokens must be a \(batch, tokens\) = \(1, 5\) bool tensor"):
        attn(torch.randn(1, 5, 16), global_tokens=torch.ones(1, 4, dtype=torch.bool))


class _Largest(TorchDispatchMode):
    """Records the most elements any op's output holds."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.most = max(self.most, t.numel())
        return out


def _dense_reference(attn, x, glob, real):
    """The layer as a dense (b, n, n) mask: window or a global key for the others, all keys for the global."""
    loc, n = attn.local, x.shape[1]
    q, k, v = loc.proj.qkv(x, x)
    sees = (dense_mask(loc.pattern, n, n)[0] | glob[:, None, :]) & real[:, None, :]
    out, _ = ReferenceKernel()(q, k, v, pattern=Full(), key_padding=sees)
    qg, kg, vg = (*attn.global_proj.qkv(x, x),)
    gout, _ = ReferenceKernel()(qg, kg, vg, pattern=Full(), key_padding=real)
    out = torch.where(glob[:, None, :, None], gout, out)
    return loc.out_proj(rearrange(out, "b h n e -> b n (h e)"))


def test_global_tokens_at_length_1024_equal_the_dense_reference_and_allocate_nothing_n_by_n():
    torch.manual_seed(0)
    n = 1024
    attn = GlobalTokenAttention(Attention(QKVProjection(16, 2, 2, 8), BlockSparseKernel(64),
                                          SlidingWindow(33, causal=False), 16), QKVProjection(16, 2, 2, 8)).eval()
    x = torch.randn(2, n, 16)
    glob = torch.zeros(2, n, dtype=torch.bool)
    glob[0, [0, 500, 1000]] = glob[1, 7] = True
    real = torch.ones(2, n, dtype=torch.bool)
    real[1, 900:] = False
    with torch.no_grad(), _Largest() as seen:
        got = attn(x, global_tokens=glob, key_padding=real)
    assert seen.most < n * n // 4  # the dense mask alone would hold 2 n^2
    with torch.no_grad():
        want = _dense_reference(attn, x, glob, real)
    assert (got[real] - want[real]).abs().max().item() <= 1e-5
