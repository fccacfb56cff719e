"""Rotary positions (Su et al. 2021): the rotation by hand, scores that depend on the distance
alone, and a rotary GPT that is causal and decodes with a KV cache as it recomputes."""
from __future__ import annotations

import math

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.nn.position.rotary import Rotary, rotate


@pytest.mark.parametrize("e,start", [(4, 0), (8, 5), (6, 11)])
def test_rotation_equals_the_pairwise_formula(e, start):
    x = torch.randn(2, 3, e, dtype=torch.float64, generator=torch.Generator().manual_seed(e + start))
    got = rotate(x, start, 10000.0)
    for p in range(3):
        for i in range(e // 2):
            th = (start + p) * 10000.0 ** (-2 * i / e)
            a, b = x[..., p, i], x[..., p, i + e // 2]
            torch.testing.assert_close(got[..., p, i], a * math.cos(th) - b * math.sin(th))
            torch.testing.assert_close(got[..., p, i + e // 2], a * math.sin(th) + b * math.cos(th))
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths


@pytest.mark.parametrize("seed", range(4))
def test_scores_depend_on_the_distance_alone(seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 2, 5, 16, dtype=torch.float64, generator=g), torch.randn(1, 2, 7, 16, dtype=torch.float64,
                                                                                  generator=g)
    shift = int(torch.randint(1, 500, (1,), generator=g))
    pos = Rotary(16)
    q1, k1, bias = pos(q, k, q_offset=2, k_offset=0, m=7)
    q2, k2, _ = pos(q, k, q_offset=2 + shift, k_offset=shift, m=7 + shift)
    assert bias is None
    torch.testing.assert_close(q1 @ k1.transpose(-1, -2), q2 @ k2.transpose(-1, -2))
    assert not torch.allclose(q1, q2)


def _gpt(seed):
    torch.manual_seed(seed)
    model = tfamily.build(members.gpt(vocab_size=23, d_model=32, dropout=0.0, depth__n_layers=2, heads__n_heads=2,
                                      position__name="rotary")).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


@pytest.mark.parametrize("seed", range(3))
def test_rotary_gpt_is_causal_and_cached_decoding_equals_recomputing(seed):
    model, g = _gpt(seed), torch.Generator().manual_seed(seed)
    x = torch.randint(0, 23, (2, 19), generator=g)
    with torch.no_grad():
        full = model(x)
        edited = x.clone()
        edited[:, 9:] = torch.randint(0, 23, (2, 10), generator=g)
        torch.testing.assert_close(model(edited)[:, :9], full[:, :9])
        state = model.new_state()
        got = [model(x[:, :4], state=state)[:, -1]] + [model(x[:, t:t + 1], state=state)[:, -1] for t in range(4, 19)]
    for t, a in enumerate(got):
        torch.testing.assert_close(a, full[:, 3 + t], atol=1e-5, rtol=1e-5)


def test_rotary_gpt_uses_no_learned_positions_and_has_no_length_limit():
    model = _gpt(0)
    assert not any("position" in n for n, _ in model.named_parameters())
    with torch.no_grad():
        assert model(torch.zeros(1, 300, dtype=torch.long)).shape == (1, 300, 23)


@pytest.mark.parametrize("kw,match", [(dict(d_head=7), "d_head must be even"), (dict(d_head=8, base=1.0), "base")])
def test_bad_sizes_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        Rotary(**kw)


def test_kept_tables_match_fresh_ones_across_offsets_lengths_and_dtypes():
    pos, g = Rotary(8), torch.Generator().manual_seed(5)
    for off, n, dtype in [(0, 4, torch.float32), (0, 4, torch.float32), (3, 4, torch.float32), (0, 6, torch.float64),
                          (0, 4, torch.bfloat16)]:
        q, k = torch.randn(1, 2, n, 8, generator=g).to(dtype), torch.randn(1, 2, n, 8, generator=g).to(dtype)
        got = pos(q, k, q_offset=off, k_offset=off, m=off + n)
        want = Rotary(8)(q, k, q_offset=off, k_offset=off, m=off + n)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        torch.testing.assert_close(got[0], rotate(q, off, 10000.0))
