"""Longformer's global tokens (Beltagy et al. 2020, section 3.1): without them the window alone; a
global query sees every key through its own projections; a windowed query sees its window and the
global keys, and nothing else."""
from __future__ import annotations

import pytest
import torch

from tfamily.build import build
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
