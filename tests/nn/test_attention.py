"""Attention as a composition: grouped-query heads against multi-head attention,
multi-query against explicitly repeated K/V, cached decoding against full
recomputation, cross-attention caching, and the key-padding checks."""
from __future__ import annotations

import pytest
import torch
from einops import rearrange
from torch import nn

from tfamily.nn.attention import Attention
from tfamily.nn.heads import QKVProjection
from tfamily.nn.kernels import ReferenceKernel, SDPAKernel
from tfamily.nn.patterns import Causal, Full
from tfamily.nn.state import KVCache

D, H, E = 32, 8, 4


def _attn(n_kv=H, kernel=None, pattern=None):
    return Attention(QKVProjection(D, H, n_kv, E), kernel or SDPAKernel(), pattern or Causal(), D).eval()


@pytest.mark.parametrize("causal", [False, True])
def test_mha_equals_torch_multihead_attention(causal):
    """n_kv_heads == n_heads is plain multi-head attention: same numbers as
    torch.nn.MultiheadAttention given the same weights."""
    ours = _attn(H, pattern=Causal() if causal else Full())
    theirs = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.proj.qkv_proj.weight)  # rows q, k, v as torch's in_proj
        theirs.in_proj_bias.copy_(ours.proj.qkv_proj.bias)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    x = torch.randn(3, 6, D)
    pad = torch.ones(3, 6, dtype=torch.bool)
    pad[2, 4:] = False
    mask = torch.ones(6, 6, dtype=torch.bool).triu(1) if causal else None
    expect, _ = theirs(x, x, x, attn_mask=mask, key_padding_mask=~pad, need_weights=False)
    torch.testing.assert_close(ours(x, key_padding=pad), expect, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_kv", [2, 1])
def test_gqa_equals_mha_with_tied_kv_heads(n_kv):
    """Grouped-query attention is multi-head attention whose K/V heads are shared
    within each group (Ainslie et al. 2023): copy the grouped K/V weights to every
    head of its group in an MHA module and the outputs and input gradients agree."""
    gqa, mha = _attn(n_kv), _attn(H)
    group = H // n_kv
    with torch.no_grad():
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
        gw, gb, mw, mb = gqa.proj.qkv_proj.weight, gqa.proj.qkv_proj.bias, mha.proj.qkv_proj.weight, mha.proj.qkv_proj.bias
        mw[:D].copy_(gw[:D])  # the query rows
        mb[:D].copy_(gb[:D])
        w = rearrange(gw[D:], "(two g e) d -> two g e d", two=2, g=n_kv)
        b = rearrange(gb[D:], "(two g e) -> two g e", two=2, g=n_kv)
        mw[D:].copy_(rearrange(w.repeat_interleave(group, 1), "two h e d -> (two h e) d"))
        mb[D:].copy_(rearrange(b.repeat_interleave(group, 1), "two h e -> (two h e)"))
    x1 = torch.randn(2, 7, D, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    y1, y2 = gqa(x1), mha(x2)
    torch.testing.assert_close(y1, y2, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(y1)
    (y1 * g).sum().backward()
    (y2 * g).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=1e-5)


def test_multi_query_every_head_sees_the_same_kv():
    attn = _attn(1)
    x = torch.randn(2, 5, D)
    q = attn.proj.q(x)
    k, v = attn.proj.kv(x)
    assert k.shape == (2, 1, 5, E)
    out, _ = ReferenceKernel()(q, k.repeat(1, H, 1, 1), v.repeat(1, H, 1, 1), pattern=Causal())
    expect = attn.out_proj(rearrange(out, "b h n e -> b n (h e)"))
    torch.testing.assert_close(attn(x), expect, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_kv", [8, 2])
def test_sdpa_and_reference_attention_agree_in_parameter_gradients(n_kv):
    a = _attn(n_kv, kernel=SDPAKernel())
    r = _attn(n_kv, kernel=ReferenceKernel())
    r.load_state_dict(a.state_dict())
    x = torch.randn(2, 6, D)
    pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    for m in (a, r):
        m(x, key_padding=pad).pow(2).sum().backward()
    for (name, pa), pr in zip(a.named_parameters(), r.parameters()):
        torch.testing.assert_close(pa.grad, pr.grad, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 2, 1]])
def test_cached_attention_equals_full_recomputation(chunks):
    attn = _attn(2)
    x = torch.randn(2, sum(chunks), D)
    full = attn(x)
    cache, outs, start = KVCache(), [], 0
    for c in chunks:
        outs.append(attn(x[:, start:start + c], cache=cache))
        start += c
    assert cache.length == x.shape[1]
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)


def test_cross_attention_cache_reuses_context_keys():
    attn = _attn(2, pattern=Full())
    ctx, pad = torch.randn(2, 9, D), torch.ones(2, 9, dtype=torch.bool)
    pad[0, 6:] = False
    x = torch.randn(2, 4, D)
    full = attn(x, context=ctx, key_padding=pad)
    cache = KVCache()
    steps = [attn(x[:, i:i + 1], context=ctx, key_padding=pad, cache=cache) for i in range(4)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 9  # the context's keys, set once, not appended per step
    # The cached K/V are used, not recomputed: a different context now changes nothing.
    again = attn(x[:, :1], context=torch.zeros_like(ctx), key_padding=pad, cache=cache)
    torch.testing.assert_close(again, steps[0])


def test_padded_keys_do_not_change_real_outputs():
    attn = _attn(2, pattern=Full())
    x = torch.randn(2, 6, D)
    pad = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    y = attn(x, key_padding=pad)
    x2 = x.clone()
    x2[1, 3:] = torch.randn(3, D)
    torch.testing.assert_close(attn(x2, key_padding=pad)[1, :3], y[1, :3])


def test_record_weights_with_reference_kernel():
    attn = _attn(2, kernel=ReferenceKernel())
    attn.record_weights = True
    attn(torch.randn(1, 5, D))
    assert attn.last_weights.shape == (1, H, 5, 5)
    assert (attn.last_weights.triu(1) == 0).all()


def test_key_padding_wrong_shape_names_shapes():
    attn = _attn()
    with pytest.raises(ValueError, match=r"\(2, 5\).*\(2, 6\)"):
        attn(torch.randn(2, 6, D), key_padding=torch.ones(2, 5, dtype=torch.bool))


def test_key_padding_wrong_dtype_names_dtype():
    attn = _attn()
    with pytest.raises(TypeError, match="torch.int64"):
        attn(torch.randn(2, 6, D), key_padding=torch.ones(2, 6, dtype=torch.long))


@pytest.mark.parametrize("seed", [0, 1])
def test_per_query_key_padding_sdpa_equals_reference_in_outputs_and_gradients(seed):
    """A (b, n, m) key padding: which keys each query sees (``LayerState.key_mask``), with a
    score bias, the same through SDPA and the plain-math kernel; a key hidden from a query
    changes nothing of it."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, H, 6, E, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = torch.randn(2, H, 6, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 6, 6, generator=g) < 0.6
    mask[..., 0] = True
    mask[0, 2, 3:], mask[0, 4, 3:] = False, True  # query 2 sees keys 0..2 at most, query 4 sees 3..5
    outs = []
    for kernel in (SDPAKernel(), ReferenceKernel()):
        out, _ = kernel(q, k, v, pattern=Full(), key_padding=mask, bias=bias)
        outs.append((out, *torch.autograd.grad(out.square().sum(), (q, k, v))))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b)
    hidden = ~mask[0, 2]
    v2 = v.detach().clone()
    v2[0, :, hidden] += 1.0
    out2, _ = SDPAKernel()(q, k, v2, pattern=Full(), key_padding=mask, bias=bias)
    torch.testing.assert_close(out2[0, :, 2], outs[0][0][0, :, 2])
    seeing = mask[0, :, hidden].any(-1)  # queries that see one of those keys do change
    assert not torch.allclose(out2[0][:, seeing], outs[0][0][0][:, seeing])


def test_per_query_key_padding_is_refused_by_kernels_that_take_it_per_key():
    from tfamily.nn.kernels import BlockSparseKernel
    attn = _attn(kernel=BlockSparseKernel())
    with pytest.raises(ValueError, match="kernel 'blocksparse'.*per query.*'sdpa' or 'reference'"):
        attn(torch.randn(2, 6, D), key_padding=torch.ones(2, 6, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"\(2, 5, 6\).*\(2, 6, 6\)"):
        _attn()(torch.randn(2, 6, D), key_padding=torch.ones(2, 5, 6, dtype=torch.bool))
