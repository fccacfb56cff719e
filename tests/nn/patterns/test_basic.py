"""Full and causal patterns as predicates over absolute positions."""
from __future__ import annotations

import torch

from tfamily.nn.patterns import PATTERNS, Causal, Full, Pattern, dense_mask


def test_causal_dense_mask_is_lower_triangular():
    m = dense_mask(Causal(), 5, 5)
    assert m.shape == (1, 5, 5) and m.dtype == torch.bool
    assert torch.equal(m[0], torch.ones(5, 5, dtype=torch.bool).tril())


def test_causal_with_q_offset_uses_absolute_positions():
    # Queries 6..8 of a cached decode over 9 keys: query at 6 sees keys 0..6.
    m = dense_mask(Causal(), 3, 9, q_offset=6)
    assert torch.equal(m[0], torch.ones(9, 9, dtype=torch.bool).tril()[6:])


def test_full_sees_everything_and_broadcasts_heads():
    m = dense_mask(Full(), 3, 7, n_heads=4, q_offset=2)
    assert m.shape == (4, 3, 7) and m.all()


def test_protocol_and_registry():
    for name, ctor in PATTERNS.items():
        if PATTERNS.entry(name).needs:  # learned patterns need the head shape
            continue
        p = ctor()
        assert isinstance(p, Pattern) and p.name == name
    assert Causal().causal and not Full().causal


def test_density_counts_what_the_dense_mask_keeps():
    from tfamily.nn.patterns import SlidingWindow, bigbird, density
    assert density(Causal(), 50) == 1.0 and density(Full(), 50) == 1.0
    for p, n, heads in ((SlidingWindow(4), 40, 1), (bigbird(block=4, n_random=1), 48, 3),
                        (SlidingWindow(8, causal=False), 30, 1)):
        m = dense_mask(p, n, n, n_heads=heads)
        scores = n * (n + 1) / 2 if p.causal else n * n
        assert abs(density(p, n, n_heads=heads, rows=n) - float(m.sum()) / (scores * heads)) < 1e-12
    # Sampled rows: the window keeps about 4 of the i + 1 keys before a query.
    assert 0.0 < density(SlidingWindow(4), 4096, rows=16) < 0.01
