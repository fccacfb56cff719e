"""The coordinate signal is eq. 6-7 of Dehghani et al. 2019: the sinusoid of the position
plus the sinusoid of the step, interleaved sin/cos, positions from the offset, steps from 1."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.nn.position.coordinate import Coordinate


@pytest.mark.parametrize("d,n,step,offset", [(8, 5, 1, 0), (6, 3, 4, 7), (7, 4, 2, 2)])
def test_equals_equation_6_and_7(d, n, step, offset):
    x = torch.randn(2, n, d)
    got = Coordinate(d)(x, step, offset) - x
    for pos in range(n):
        for i in range(d):
            j = i // 2
            f = math.sin if i % 2 == 0 else math.cos
            w = 10000 ** (2 * j / d)
            expected = f((pos + offset) / w) + f(step / w)
            assert got[0, pos, i].item() == pytest.approx(expected, abs=1e-5)
    torch.testing.assert_close(got[0], got[1])


def test_steps_differ_and_start_at_one():
    x = torch.zeros(1, 3, 8)
    c = Coordinate(8)
    assert not torch.allclose(c(x, 1), c(x, 2))
    with pytest.raises(ValueError, match="step=0"):
        c(x, 0)


def test_kept_tables_match_a_fresh_module_across_calls():
    """One module called with changing offsets, lengths, steps (past its first table of 16), dtypes
    and inference mode gives what a fresh module gives each time."""
    c, gen = Coordinate(6), torch.Generator().manual_seed(3)
    for step, offset, n, dtype in [(1, 0, 4, torch.float32), (2, 0, 4, torch.float32), (40, 3, 4, torch.float32),
                                   (17, 3, 2, torch.float64), (1, 9, 5, torch.bfloat16), (3, 0, 4, torch.float32)]:
        x = torch.randn(2, n, 6, generator=gen).to(dtype)
        torch.testing.assert_close(c(x, step, offset), Coordinate(6)(x, step, offset))
        with torch.inference_mode():
            y = c(x, step, offset)
        torch.testing.assert_close(y, Coordinate(6)(x, step, offset))
    x = torch.randn(1, 3, 6, requires_grad=True)
    c(x, 2).sum().backward()  # the kept tables never hold inference tensors in training
    torch.testing.assert_close(x.grad, torch.ones_like(x))


def test_row_offsets_equal_each_row_at_its_own_offset_and_are_not_kept_stale():
    c = Coordinate(16)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 7, 16, generator=g)
    for off in (torch.tensor([0, 12, 40]), torch.tensor([3, 3, 9])):  # a new tensor each batch
        for step in (1, 2, 3):
            want = torch.cat([Coordinate(16)(x[i:i + 1], step, int(off[i])) for i in range(3)])
            assert torch.equal(c(x, step, off), want)
    off = torch.tensor([1, 2, 3])
    c(x, 1, off)
    off += 5  # modified in place: recomputed, not served from the kept table
    assert torch.equal(c(x, 1, off), torch.cat([Coordinate(16)(x[i:i + 1], 1, int(off[i])) for i in range(3)]))


@pytest.mark.parametrize("offset", [5, "rows"])
def test_float64_states_get_a_float64_table(offset):
    """eq. 6-7 in fp64 to ~1e-12 (an fp32 table was off by ~7e-7), for cached and per-row offsets;
    a cached fp32 table is not reused for fp64."""
    d, n, step = 10, 6, 23
    c = Coordinate(d)
    c(torch.zeros(1, n, d), step, 5)  # fills the fp32 caches first
    x = torch.zeros(2, n, d, dtype=torch.float64)
    off = torch.tensor([5, 5]) if offset == "rows" else offset
    got = c(x, step, off)
    assert got.dtype == torch.float64
    for pos in range(n):
        for i in range(d):
            f, w = (math.sin if i % 2 == 0 else math.cos), 10000 ** (2 * (i // 2) / d)
            assert abs(got[0, pos, i].item() - (f((pos + 5) / w) + f(step / w))) < 1e-12
