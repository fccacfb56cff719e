"""Absolute positions: the sinusoid of Vaswani et al. 2017, section 3.5, learned
tables with a hard length limit, and offsets for cached decoding."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.nn.position import POSITIONS, Learned, NoPosition, Sinusoidal, sinusoid_table


def test_sinusoid_matches_the_paper_formula():
    d = 6
    pe = sinusoid_table(torch.arange(5), d)
    for pos in range(5):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert sinusoid_table(torch.arange(3), 7).shape == (3, 7)


@pytest.mark.parametrize("pos", [Sinusoidal(8), Learned(32, 8)])
def test_offset_continues_the_sequence(pos):
    x = torch.zeros(2, 10, 8)
    whole = pos(x)
    torch.testing.assert_close(torch.cat([pos(x[:, :4]), pos(x[:, 4:], offset=4)], 1), whole)
    assert not torch.allclose(whole[:, 0], whole[:, 1])


def test_learned_table_limit_names_lengths():
    pos = Learned(16, 8)
    pos(torch.zeros(1, 16, 8))
    with pytest.raises(ValueError, match="17.*max_len=16"):
        pos(torch.zeros(1, 17, 8))
    with pytest.raises(ValueError, match="20.*max_len=16"):
        pos(torch.zeros(1, 5, 8), offset=15)


def test_no_position_and_registry():
    x = torch.randn(1, 3, 4)
    assert torch.equal(NoPosition()(x, offset=7), x)
    assert isinstance(POSITIONS.make("learned", d_model=4, max_len=9), Learned)
    assert POSITIONS.make("learned", d_model=4, max_len=9).max_len == 9
    assert isinstance(POSITIONS.make("sinusoidal", d_model=4, max_len=9), Sinusoidal)
    assert isinstance(POSITIONS.make("none", d_model=4, max_len=9), NoPosition)
    with pytest.raises(ValueError, match="valid keys: none"):
        POSITIONS.check_params("sinusoidal", {"base": 10000})


@pytest.mark.parametrize("pos", [Sinusoidal(16), Learned(64, 16), NoPosition()])
def test_row_offsets_equal_each_row_at_its_own_offset(pos):
    """A (b,) tensor of offsets (randomized offsets drawn per example) places row i at
    offset[i]..offset[i]+n-1, exactly as that row alone with the int offset."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 9, 16, generator=g)
    off = torch.tensor([0, 31, 5, 54])
    want = torch.cat([pos(x[i:i + 1], int(off[i])) for i in range(4)])
    assert torch.equal(pos(x, off), want)


def test_row_offsets_are_checked():
    with pytest.raises(ValueError, match=r"\(batch,\) integer tensor.*torch.float32"):
        Sinusoidal(8)(torch.randn(2, 3, 8), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="reaches position 63.*max_len=60"):
        Learned(60, 8)(torch.randn(2, 3, 8), torch.tensor([0, 60]))
