"""BigBird's random blocks: r per query block, fixed per (seed, layer, head), causal."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.nn.patterns import GlobalTokens, RandomBlocks, SlidingWindow, bigbird, dense_mask
from tfamily.nn.patterns.bigbird import BlockWindow


def _blocks(mask, block):
    """(h, n, n) -> (h, n_blocks, n_blocks): which key blocks each query block touches."""
    h, n, _ = mask.shape
    return mask.view(h, n // block, block, n // block, block).any(2).any(-1)


def test_each_query_block_sees_at_most_r_earlier_blocks():
    p = RandomBlocks(n_random=3, block=4, seed=1)
    m = dense_mask(p, 96, 96, n_heads=3)
    counts = _blocks(m, 4).sum(-1)
    assert (counts >= 1).all() and (counts <= 3).all()
    assert not m.triu(1).any()


def test_layout_is_fixed_by_seed_and_differs_by_head_and_layer():
    m = dense_mask(RandomBlocks(2, 4, seed=7, layer=1), 128, 128, n_heads=2)
    assert torch.equal(m, dense_mask(RandomBlocks(2, 4, seed=7, layer=1), 128, 128, n_heads=2))
    assert not torch.equal(m[0], m[1])
    assert not torch.equal(m, dense_mask(RandomBlocks(2, 4, seed=7, layer=2), 128, 128, n_heads=2))
    assert not torch.equal(m, dense_mask(RandomBlocks(2, 4, seed=8, layer=1), 128, 128, n_heads=2))


def test_bigbird_is_global_window_and_random():
    p = bigbird(block=4, n_random=2, seed=3)
    parts = [SlidingWindow(12), GlobalTokens(8), RandomBlocks(2, 4, seed=3)]
    want = sum(dense_mask(q, 64, 64, n_heads=2).int() for q in parts) > 0
    assert torch.equal(dense_mask(p, 64, 64, n_heads=2), want)


def test_build_seeds_each_layer_differently():
    spec = members.bigbird(d_model=32, heads__n_heads=2, depth__n_layers=2, position__max_len=64)
    model = tfamily.build(spec)
    layers = [blk.attn.pattern.patterns[2].layer for blk in model.stack.blocks]
    assert layers == [0, 1]


def test_non_causal_needs_n_blocks_and_respects_it():
    with pytest.raises(ValueError, match="n_blocks"):
        RandomBlocks(2, 4, causal=False)
    m = dense_mask(RandomBlocks(2, 4, causal=False, n_blocks=3), 40, 40)
    assert not m[0, :, 12:].any()  # only blocks 0..2 can be drawn


@pytest.mark.parametrize("kw,word", [(dict(n_random=0), "n_random"), (dict(block=0), "block"),
                                     (dict(seed=-1), "seed")])
def test_invalid_parameters_name_the_value(kw, word):
    with pytest.raises(ValueError, match=word):
        RandomBlocks(**kw)


@pytest.mark.parametrize("block,n", [(4, 40), (8, 64), (5, 37)])
def test_two_sided_bigbird_is_its_definition(block, n):
    """Zaheer et al. 2020, section 2 / appendix D: a window of 3 blocks (the query's and one
    on each side), 2 global blocks seen by and seeing everything, r random blocks."""
    n_blocks = -(-n // block)
    p = bigbird(block=block, n_random=2, seed=5, causal=False, n_blocks=n_blocks)
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    window = ((i // block) - (j // block)).abs() <= 1
    glob = (j < 2 * block) | (i < 2 * block)
    rand = dense_mask(RandomBlocks(2, block, seed=5, causal=False, n_blocks=n_blocks), n, n, n_heads=3)
    expected = window | glob | rand
    assert torch.equal(dense_mask(p, n, n, n_heads=3), expected)
    # An interior query's window part holds exactly 3 blocks of keys.
    q = 3 * block + 1
    assert int(window[q].sum()) == 3 * block
    assert int(dense_mask(BlockWindow(block), n, n)[0, q].sum()) == 3 * block


def test_two_sided_window_must_be_an_odd_number_of_blocks():
    assert bigbird(block=4, window=20, causal=False, n_blocks=8).patterns[0] == BlockWindow(4, radius=2)
    for window in (8, 6):
        with pytest.raises(ValueError, match="odd multiple of block=4"):
            bigbird(block=4, window=window, causal=False, n_blocks=8)


@pytest.mark.parametrize("causal", [False, True])
def test_block_window_candidates_cover_the_mask(causal):
    p = BlockWindow(6, radius=1, causal=causal)
    n, B = 60, 8
    pos = torch.arange(64).clamp(max=n - 1).view(-1, B)
    cand = p.block_candidates(pos, pos, (0,))[0]
    m = dense_mask(p, n, n)[0]
    m = torch.nn.functional.pad(m, (0, 64 - n, 0, 64 - n)).view(8, B, 8, B).any(1).any(-1)
    assert not (m & ~cand).any()
