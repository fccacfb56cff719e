"""Alignment scores (nn/alignment.py): each equals its paper's formula written out per
pair, concat and additive are one score, and attention weights sum to 1 with padding at
exactly 0."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.alignment import Concat, Dot, General, ScaledDot, attend
from tfamily.registry import ALIGNMENTS


def _pairs(seed: int, b=2, n=3, m=5, d=4, e=6):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, n, d, generator=g, dtype=torch.float64),
            torch.randn(b, m, e, generator=g, dtype=torch.float64))


def _per_pair(query, memory, f):
    b, n, m = query.shape[0], query.shape[1], memory.shape[1]
    with torch.no_grad():
        return torch.tensor([[[float(f(query[i, t], memory[i, s])) for s in range(m)] for t in range(n)]
                             for i in range(b)], dtype=torch.float64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dot_and_scaled_dot_equal_their_formulas(seed):
    q, h = _pairs(seed, e=4)
    assert torch.allclose(Dot(4, 4)(q, Dot(4, 4).keys(h)), _per_pair(q, h, lambda a, c: a @ c))
    assert torch.allclose(ScaledDot(4, 4)(q, h), _per_pair(q, h, lambda a, c: a @ c / 2.0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_general_equals_h_t_W_a_h_s(seed):
    torch.manual_seed(seed)
    q, h = _pairs(seed)
    score = General(4, 6).double()
    w_a = score.w_a.weight  # (d_query, d_key)
    ref = _per_pair(q, h, lambda a, c: a @ w_a @ c)
    assert torch.allclose(score(q, score.keys(h)), ref)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_concat_equals_v_tanh_W_a_of_the_concatenation(seed):
    torch.manual_seed(seed)
    q, h = _pairs(seed)
    score = Concat(4, 6).double()
    w_a = torch.cat([score.w_q.weight, score.w_k.weight], dim=1)  # W_a acting on [h_t; h_s]
    v_a = score.v_a.weight[0]
    ref = _per_pair(q, h, lambda a, c: v_a @ torch.tanh(w_a @ torch.cat([a, c])))
    assert torch.allclose(score(q, score.keys(h)), ref)


def test_additive_is_bahdanaus_v_tanh_W_s_plus_U_h_and_the_same_part_as_concat():
    assert ALIGNMENTS["additive"] is ALIGNMENTS["concat"] is Concat
    torch.manual_seed(0)
    q, h = _pairs(3)
    score = Concat(4, 6).double()
    W, U, v = score.w_q.weight, score.w_k.weight, score.v_a.weight[0]  # Bahdanau A.1.2: W_a, U_a, v_a
    ref = _per_pair(q, h, lambda s, hj: v @ torch.tanh(W @ s + U @ hj))
    assert torch.allclose(score(q, score.keys(h)), ref)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weights_sum_to_one_padding_gets_exactly_zero_and_context_is_the_weighted_sum(seed):
    torch.manual_seed(seed)
    q, h = _pairs(seed)
    padding = torch.tensor([[True, True, True, False, False], [True, True, True, True, True]])
    score = Concat(4, 6).double()
    context, w = attend(score(q, score.keys(h)), h, padding)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    assert torch.equal(w[0, :, 3:], torch.zeros(3, 2, dtype=torch.float64))
    assert bool((w[0, :, :3] > 0).all()) and bool((w[1] > 0).all())
    assert torch.allclose(context, torch.einsum("bnm,bme->bne", w, h))
    # Padding is invisible: changing the padded states changes nothing.
    h2 = h.clone()
    h2[0, 3:] = 100.0
    context2, w2 = attend(score(q, score.keys(h2)), h2, padding)
    assert torch.equal(w2[0], w[0]) and torch.allclose(context2[0], context[0])


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="'dot' needs .* one size"):
        Dot(4, 8)
    with pytest.raises(ValueError, match="no real token"):
        attend(torch.zeros(1, 1, 2), torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="unknown alignment 'cosine'"):
        ALIGNMENTS.check("cosine")


def test_attend_keeps_float64_end_to_end():
    """fp64 scores are softmaxed in fp64 (not fp32), so weights and contexts match an fp64
    reference to ~1e-12 (the fp32 softmax was off by ~3e-9)."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 7, generator=g, dtype=torch.float64) * 4
    values = torch.randn(2, 7, 5, generator=g, dtype=torch.float64)
    ctx, w = attend(scores, values)
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    ref = e / e.sum(-1, keepdim=True)
    assert w.dtype == torch.float64 and (w - ref).abs().max() < 1e-12
    assert (ctx - ref @ values).abs().max() < 1e-12
    # narrower inputs still get an fp32 softmax
    _, w16 = attend(scores.bfloat16(), values.bfloat16())
    assert w16.dtype == torch.bfloat16 and torch.allclose(w16.double(), ref, atol=1e-2)
