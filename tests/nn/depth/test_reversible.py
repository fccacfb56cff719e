"""The reversible stack (Gomez et al. 2017; Kitaev et al. 2020, section 3): recomputing
activations in the backward pass gives the outputs and every gradient of the same layers
run as a plain two-stream stack, dropout and LSH hashing included, and stores nothing per
layer."""
from __future__ import annotations

import pytest
import torch

from tfamily.build import block, build, stack
from tfamily.models.generate import generate
from tfamily.nn.depth import ReversibleStack
from tfamily.spec import Spec

DT = torch.float64


def _spec(**kw) -> Spec:
    base = dict(member="t", d_model=16, dropout=0.2, attn_dropout=0.1, heads={"n_heads": 4},
                residual={"name": "pre_norm"}, depth={"name": "reversible", "n_layers": 3},
                ff={"d_ff": 32, "chunks": 2})
    return Spec(**base).override(kw)


CASES = {
    "causal_sdpa": {},
    "gqa": {"heads.n_kv_heads": 2},
    "sliding_window": {"pattern": {"name": "sliding_window", "params": {"window": 4}}},
    "lsh": {"kernel": {"name": "lsh", "params": {"n_hashes": 2, "bucket_size": 2}},
            "heads.shared_qk": True},
    # a convolution transition reads neighbours: both paths must hand it the padding
    "sepconv_centred": {"ff.name": "sepconv", "ff.chunks": 1, "pattern": {"name": "full"}},
    "sepconv_causal": {"ff.name": "sepconv", "ff.chunks": 1},
}


def _grads(model, x, key_padding, seed):
    torch.manual_seed(seed)
    x = x.detach().clone().requires_grad_()
    model.zero_grad(set_to_none=True)
    y = model(x, key_padding=key_padding)
    (y * torch.cos(torch.arange(y.numel(), dtype=y.dtype)).view_as(y)).sum().backward()
    return y, x.grad, {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("case", CASES)
def test_recomputation_equals_the_plain_two_stream_stack(case):
    spec = _spec(**CASES[case])
    torch.manual_seed(0)
    rev = stack(spec, spec.depth.n_layers).to(DT).train()
    assert isinstance(rev, ReversibleStack)
    x = torch.randn(2, 11, 16, dtype=DT)
    pad = torch.ones(2, 11, dtype=torch.bool)
    pad[0, -3:] = False
    rev.recompute = True
    y1, gx1, gp1 = _grads(rev, x, pad, seed=1)
    rev.recompute = False
    y2, gx2, gp2 = _grads(rev, x, pad, seed=1)
    torch.testing.assert_close(y1, y2, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gx1, gx2, rtol=1e-8, atol=1e-10)
    assert gp1.keys() == gp2.keys() and len(gp1) > 0
    for name in gp1:
        assert gp1[name] is not None, name
        torch.testing.assert_close(gp1[name], gp2[name], rtol=1e-8, atol=1e-10, msg=name)
    # dropout is live: another seed gives another output
    rev.recompute = True
    y3, _, _ = _grads(rev, x, pad, seed=2)
    assert not torch.allclose(y1, y3)


def test_the_two_stream_stack_is_eq_7():
    """y1 = x1 + F(x2), y2 = x2 + G(y1) from x1 = x2 = x; output the mean, then the final norm."""
    spec = _spec(dropout=0.0, attn_dropout=0.0)
    rev = stack(spec, 2).to(DT).eval()
    x = torch.randn(1, 5, 16, dtype=DT)
    x1 = x2 = x
    for blk in rev.blocks:
        x1 = x1 + blk.attn(blk.attn_residual.norm(x2))
        x2 = x2 + blk.ff(blk.ff_residual.norm(x1))
    torch.testing.assert_close(rev(x), rev.final_norm((x1 + x2) / 2))


def test_stored_activations_do_not_grow_with_depth(saved_numel):
    x = torch.randn(2, 16, 16, requires_grad=True)
    rev = [saved_numel(stack(_spec(), n).train(), x) for n in (2, 8)]
    plain = [saved_numel(stack(_spec(depth={"name": "stack"}), n).train(), x) for n in (2, 8)]
    assert rev[0] == rev[1]
    assert plain[1] > 3 * plain[0]


def test_kv_cache_decoding_equals_full_recomputation():
    spec = _spec(vocab_size=20, dropout=0.0, attn_dropout=0.0)
    model = build(spec).eval()
    prompt = torch.randint(0, 20, (2, 5))
    torch.testing.assert_close(generate(model, prompt, 6, greedy=True),
                               generate(model, prompt, 6, greedy=True, use_cache=False))


def test_invalid_combinations_name_both_choices():
    with pytest.raises(ValueError, match="reversible.*post_norm"):
        _spec(residual={"name": "post_norm"})
    with pytest.raises(ValueError, match="reversible.*encoder_decoder"):
        _spec(model="encoder_decoder", objective={"name": "seq2seq"})
    with pytest.raises(ValueError, match="reversible.*checkpointing"):
        _spec(**{"depth.checkpointing": True})


def test_layers_with_cross_attention_are_refused():
    spec = _spec(depth={"name": "stack"})
    with pytest.raises(ValueError, match="cross-attention"):
        ReversibleStack([block(spec, 0, cross=True)])
