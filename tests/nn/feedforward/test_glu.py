"""The gated feed-forward (Shazeer 2020, eq. 5-6) against its equation, and as a spec choice."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tfamily import build, members
from tfamily.nn.feedforward import GLU


def test_swiglu_is_its_equation():
    torch.manual_seed(0)
    ff = GLU(8, 12, activation="silu", bias=False)
    x = torch.randn(2, 5, 8)
    w, v, w2 = ff.gate.weight, ff.up.weight, ff.down.weight
    want = (F.silu(x @ w.T) * (x @ v.T)) @ w2.T
    torch.testing.assert_close(ff(x), want)


def test_glu_and_rms_norm_build_as_choices():
    spec = members.gpt(d_model=16, vocab_size=20, heads={"n_heads": 2}, depth={"n_layers": 1},
                       ff={"name": "glu", "activation": "silu", "d_ff": 24}, norm={"name": "rms_norm"})
    model = build(spec)
    assert isinstance(model.stack.blocks[0].ff, GLU)
    assert type(model.stack.final_norm).__name__ == "RMSNorm"
    assert spec.choices()["residual"] == "pre_norm rms_norm"
    assert model(torch.randint(0, 20, (1, 4))).shape == (1, 4, 20)
