"""One layer as written in the papers: post-norm LayerNorm(x + Sublayer(x)) with an
optional cross-attention sublayer (Vaswani et al. 2017, section 3.1), pre-norm
x + Sublayer(LayerNorm(x)); cached stepping equals the full pass."""
from __future__ import annotations

import torch

from tfamily.nn.attention import Attention
from tfamily.nn.block import Block
from tfamily.nn.feedforward import MLP
from tfamily.nn.heads import QKVProjection
from tfamily.nn.kernels import SDPAKernel
from tfamily.nn.patterns import Causal, Full
from tfamily.nn.residual import PostNorm, PreNorm
from tfamily.nn.state import LayerState, new_state

D = 16


def _attn(pattern):
    return Attention(QKVProjection(D, 4, 2, 4), SDPAKernel(), pattern, D)


def _block(res=PostNorm, cross=False):
    return Block(_attn(Causal()), MLP(D, 32), res(D), res(D),
                 cross=_attn(Full()) if cross else None, cross_residual=res(D) if cross else None).eval()


def test_post_norm_decoder_layer_matches_the_paper():
    blk = _block(PostNorm, cross=True)
    x, ctx = torch.randn(2, 5, D), torch.randn(2, 7, D)
    pad = torch.ones(2, 7, dtype=torch.bool)
    pad[1, 5:] = False
    h = blk.attn_residual.norm(x + blk.attn(x))
    h = blk.cross_residual.norm(h + blk.cross(h, context=ctx, key_padding=pad))
    h = blk.ff_residual.norm(h + blk.ff(h))
    torch.testing.assert_close(blk(x, context=ctx, context_padding=pad), h)


def test_pre_norm_layer_and_memory_is_normalised_like_the_stream():
    blk = _block(PreNorm)
    x, mem = torch.randn(2, 3, D), torch.randn(2, 4, D)
    ln = blk.attn_residual.norm
    h = x + blk.attn(ln(x), memory=ln(mem))
    h = h + blk.ff(blk.ff_residual.norm(h))
    torch.testing.assert_close(blk(x, state=LayerState(memory=mem)), h)


def test_cached_block_steps_equal_full_pass():
    blk = _block(PostNorm, cross=True)
    x, ctx = torch.randn(2, 6, D), torch.randn(2, 4, D)
    full = blk(x, context=ctx)
    state = new_state(1, cross=True)[0]
    steps = [blk(x[:, i:i + 1], context=ctx, state=state) for i in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_the_feed_forward_gets_the_layer_state_and_the_padding_of_its_own_positions():
    # With a KV cache key_padding covers the cached keys first; the feed-forward gets x's columns.
    seen = []

    class Recording(MLP):
        def forward(self, x, *, state=None, padding=None):
            seen.append((state, padding))
            return super().forward(x)

    blk = Block(_attn(Causal()), Recording(D, 32), PostNorm(D), PostNorm(D)).eval()
    state = new_state(1)[0]
    pad = torch.tensor([[True, True, False, True, True], [True, True, True, True, False]])
    blk(torch.randn(2, 3, D), state=state, key_padding=pad[:, :3])
    blk(torch.randn(2, 2, D), state=state, key_padding=pad)
    blk(torch.randn(2, 2, D))
    assert [s is state for s, _ in seen] == [True, True, False]
    assert torch.equal(seen[0][1], pad[:, :3]) and torch.equal(seen[1][1], pad[:, 3:]) and seen[2][1] is None
