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
