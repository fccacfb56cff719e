"""Transformer-XL relative attention: the shift trick equals the four terms computed
pair by pair; the hook composes with kernels, grouped-query heads and KV caches."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.nn.attention import Attention
from tfamily.nn.heads import QKVProjection
from tfamily.nn.kernels import ReferenceKernel, SDPAKernel
from tfamily.nn.patterns import Causal, Full
from tfamily.nn.position import POSITIONS, sinusoid_table
from tfamily.nn.position.relative import RelativePosition, shift
from tfamily.nn.state import KVCache


def naive_scores(pos: RelativePosition, q, k, q_offset: int):
    """Dai et al. 2019, section 3.3: terms (a) + (b) + (c) + (d) for every pair (i, j),
    unscaled, with -inf where same_length hides the key."""
    b, h, n, e = q.shape
    m = k.shape[-2]
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    rows = []
    for i in range(n):
        cols = []
        for j in range(m):
            d = q_offset + i - j
            if pos.clamp_len is not None:
                d = max(-pos.clamp_len, min(pos.clamp_len, d))
            r = pos.r_proj(sinusoid_table(torch.tensor([d]), pos.d_model)).view(h, e)  # W_R^k r_{i-j}
            qi, kj = q[:, :, i], k[:, :, j]
            score = ((qi * kj).sum(-1) + (qi * r).sum(-1)          # (a) content, (b) content-position
                     + (pos.u * kj).sum(-1) + (pos.v * r).sum(-1))  # (c) global content, (d) global position
            if pos.same_length and q_offset > 0 and j < i:
                score = torch.full_like(score, float("-inf"))
            cols.append(score)
        rows.append(torch.stack(cols, -1))
    return torch.stack(rows, -2)


def fast_scores(pos: RelativePosition, q, k, q_offset: int):
    m = k.shape[-2]
    qu, k_out, bias = pos(q, k, q_offset=q_offset, k_offset=0, m=m)
    assert k_out is k
    kk = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    return qu @ kk.transpose(-1, -2) + bias * math.sqrt(q.shape[-1])


def test_shift_skews_rows():
    n, m = 4, 7
    x = torch.randn(2, n, n + m - 1)
    out = shift(x, n, m)
    want = torch.stack([torch.stack([x[:, i, n - 1 - i + j] for j in range(m)], -1) for i in range(n)], -2)
    assert torch.equal(out, want)
    assert torch.equal(shift(x[:, :1, :m], 1, m), x[:, :1, :m])  # one query: nothing to skew


@pytest.mark.parametrize("n,m,q_offset,kw,h_kv", [
    (5, 5, 0, {}, 4),                                   # one segment, no memory
    (4, 9, 5, {}, 4),                                   # with memory
    (4, 9, 0, {}, 4),                                   # keys after the queries (non-causal patterns)
    (4, 11, 7, {"clamp_len": 3}, 4),                    # clamped distances
    (4, 9, 5, {"same_length": True}, 4),                # same_length with memory
    (6, 10, 4, {"same_length": True, "clamp_len": 5}, 2),  # both, grouped-query keys
    (1, 8, 7, {}, 1),                                   # a decode step, multi-query keys
])
def test_shift_trick_equals_four_terms(n, m, q_offset, kw, h_kv):
    h, e, d = 4, 8, 16
    pos = RelativePosition(d, h, e, **kw)
    q = torch.randn(2, h, n, e, requires_grad=True)
    k = torch.randn(2, h_kv, m, e, requires_grad=True)
    fast, slow = fast_scores(pos, q, k, q_offset), naive_scores(pos, q, k, q_offset)
    assert torch.equal(torch.isinf(fast), torch.isinf(slow))
    live = torch.isfinite(slow)
    torch.testing.assert_close(fast[live], slow[live], atol=1e-5, rtol=1e-5)
    # Gradients (q, k, u, v, W_R^k) through the finite scores agree too.
    w = torch.randn_like(slow)
    grads = []
    for scores in (fast, slow):
        params = [q, k, pos.u, pos.v, pos.r_proj.weight]
        grads.append(torch.autograd.grad((scores[live] * w[live]).sum(), params, retain_graph=True))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_same_length_gives_every_query_as_many_keys_as_the_first():
    pos = RelativePosition(16, 2, 8, same_length=True)
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 12, 8)
    _, _, bias = pos(q, k, q_offset=7, k_offset=0, m=12)
    causal = torch.arange(12)[None, :] <= 7 + torch.arange(5)[:, None]
    seen = (torch.isfinite(bias[0, 0]) & causal).sum(-1)
    assert seen.tolist() == [8] * 5


def test_content_term_uses_u_and_position_term_uses_v():
    # Zero W_R^k: scores are (q + u).k only; zero content keys: scores are the bias only.
    pos = RelativePosition(16, 2, 8)
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    with torch.no_grad():
        pos.r_proj.weight.zero_()
    torch.testing.assert_close(fast_scores(pos, q, k, 0), (q + pos.u[:, None]) @ k.transpose(-1, -2))
    pos = RelativePosition(16, 2, 8)
    zeros = torch.zeros_like(k)
    r = pos.embeddings(pos.distances(0, 3, 3), q.dtype)  # distances 2, 1, 0, -1, -2
    want = torch.einsum("bhne,hle->bhnl", q + pos.v[:, None], r)
    got = fast_scores(pos, q, zeros, 0)
    for i in range(3):
        for j in range(3):
            torch.testing.assert_close(got[..., i, j], want[..., i, 2 - i + j])


def _attention(kernel, h=4, h_kv=4, e=8, d=32, **kw):
    torch.manual_seed(1)
    return Attention(QKVProjection(d, h, h_kv, e), kernel, Causal(), d, position=RelativePosition(d, h, e, **kw))


@pytest.mark.parametrize("h_kv", [4, 2])
def test_sdpa_equals_reference_with_memory(h_kv):
    ref, fast = _attention(ReferenceKernel(), h_kv=h_kv), _attention(SDPAKernel(), h_kv=h_kv)
    x, mem = torch.randn(2, 5, 32, requires_grad=True), torch.randn(2, 6, 32)
    outs = [a(x, memory=mem) for a in (ref, fast)]
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
    gx = [torch.autograd.grad(o.square().sum(), [x, a.position.u, a.position.r_proj.weight])
          for o, a in zip(outs, (ref, fast))]
    for a, b in zip(*gx):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_gqa_with_all_heads_equals_multi_head():
    a = _attention(SDPAKernel(), h_kv=4)
    x = torch.randn(2, 6, 32)
    q, (k, v) = a.proj.q(x), a.proj.kv(x)
    qu, _, bias = a.position(q, k, q_offset=0, k_offset=0, m=6)
    out, _ = ReferenceKernel()(qu, k, v, pattern=Causal(), bias=bias)
    torch.testing.assert_close(a.out_proj(out.transpose(1, 2).flatten(2)), a(x), atol=1e-5, rtol=1e-5)


def test_kv_cache_decoding_equals_full_recomputation():
    a = _attention(SDPAKernel(), h_kv=2).eval()
    x = torch.randn(1, 7, 32)
    cache = KVCache()
    steps = torch.cat([a(x[:, :3], cache=cache)] + [a(x[:, t:t + 1], cache=cache) for t in range(3, 7)], 1)
    torch.testing.assert_close(steps, a(x), atol=1e-5, rtol=1e-5)


def test_scores_depend_only_on_distance():
    # Shifting every position by the same amount (a longer memory in front) leaves the
    # position terms unchanged: the point of replacing absolute positions (section 3.3).
    pos = RelativePosition(16, 2, 8)
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    _, _, near = pos(q, k, q_offset=0, k_offset=0, m=3)
    far_k = torch.cat([torch.randn(1, 2, 10, 8), k], 2)
    _, _, far = pos(q, far_k, q_offset=10, k_offset=0, m=13)
    torch.testing.assert_close(far[..., 10:], near)


def test_full_pattern_uses_negative_distances():
    a = Attention(QKVProjection(32, 4, 4, 8), ReferenceKernel(), Full(), 32, position=RelativePosition(32, 4, 8))
    x = torch.randn(1, 5, 32)
    flipped = a(x.flip(1)).flip(1)
    assert not torch.allclose(a(x), flipped, atol=1e-4)  # order matters both ways


def test_registry_and_validation():
    assert POSITIONS["relative"] is RelativePosition
    assert POSITIONS.entry("relative").info["stage"] == "attention"
    assert POSITIONS.valid_params("relative") == ("clamp_len", "same_length")
    with pytest.raises(ValueError, match="clamp_len"):
        RelativePosition(16, 2, 8, clamp_len=-1)
    with pytest.raises(TypeError, match="same_length"):
        RelativePosition(16, 2, 8, same_length="yes")
    with pytest.raises(ValueError, match="with 4"):
        RelativePosition(16, 2, 8)(torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8), q_offset=0,
                                   k_offset=0, m=3)


def test_float64_sinusoids_are_float64():
    # Issue 13.3: the table was computed in fp32 and cast, leaving errors near 1e-7 at
    # distances in the thousands; fp64 models get fp64 angles.
    d = torch.arange(5000, -5000, -37)
    i = torch.arange(0, 16, 2, dtype=torch.float64)
    ang = d.double()[:, None] * torch.exp(-math.log(10000.0) * i / 16)[None, :]
    exact = torch.stack([ang.sin(), ang.cos()], -1).flatten(-2)
    torch.testing.assert_close(sinusoid_table(d, 16, torch.float64), exact, atol=1e-12, rtol=0)
    pos = RelativePosition(16, 2, 8).double()
    r = pos.embeddings(d, torch.float64)
    want = (exact @ pos.r_proj.weight.T).view(-1, 2, 8).transpose(0, 1)
    torch.testing.assert_close(r, want, atol=1e-12, rtol=0)
    assert sinusoid_table(d, 16).dtype == torch.float32  # narrower inputs keep the fp32 table
