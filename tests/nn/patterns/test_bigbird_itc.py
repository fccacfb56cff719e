"""BigBird-ITC as the peer computes it in eval mode: first and last block global, a window of
three blocks, block 0 seen 1 + r times (r copies prepended), full attention on short inputs;
the block-sparse kernel equals the dense reference in outputs and gradients."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.attention import Attention
from tfamily.nn.heads import QKVProjection
from tfamily.nn.kernels import BlockSparseKernel, ReferenceKernel
from tfamily.nn.patterns import BigBirdITC, SoftPatternKernel, dense_mask


def test_the_layout_is_the_peers():
    p = BigBirdITC(block=8, n_random=2).at_length(100)  # 13 padded blocks, 16 copied keys of block 0 first
    allowed = dense_mask(p, 100, 100 + 16, q_offset=16)[0]
    assert allowed[:8, 16:].all() and allowed[96:, 16:].all() and not allowed[:8, :16].any()  # global rows
    row = allowed[5 * 8]  # a middle block: 2 copies of block 0, block 0, blocks 4-6, the last (4 real keys)
    assert row.sum().item() == 8 * (2 + 1 + 3) + 4
    assert row[:24].all() and row[16 + 32:16 + 56].all() and row[16 + 96:].all()
    short = BigBirdITC(block=8, n_random=2).at_length(72)  # (5 + 2 r) blocks: the peer's fall-back
    assert short.copies == 0 and dense_mask(short, 72, 72).all()
    with pytest.raises(ValueError, match="n_random must be"):
        BigBirdITC(block=8, n_random=-1)


@pytest.mark.parametrize("n", [96, 123])
def test_blocksparse_equals_the_reference_in_outputs_and_gradients(n):
    torch.manual_seed(0)
    outs = []
    for kernel in (ReferenceKernel(), BlockSparseKernel(8)):
        torch.manual_seed(0)
        attn = Attention(QKVProjection(32, 4, 4, 8), SoftPatternKernel(kernel), BigBirdITC(8, 2), 32)
        x = torch.randn(2, n, 32, generator=torch.Generator().manual_seed(1), requires_grad=True)
        real = torch.ones(2, n, dtype=torch.bool)
        real[1, n - 20:] = False
        out = attn(x, key_padding=real)
        (out[real] ** 2).sum().backward()
        outs.append((out[real], x.grad[real], attn.proj.qkv_proj.weight.grad))
    for a, b in zip(*outs):
        assert torch.allclose(a, b, atol=1e-5)
