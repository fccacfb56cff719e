"""Local patterns equal their papers' definitions, written out as loops over (i, j)."""
from __future__ import annotations

import pytest
import torch

from tfamily.data.pixels import from_block_raster, to_block_raster
from tfamily.nn.patterns import GlobalTokens, Local1D, Local2D, SlidingWindow, dense_mask


def _brute(n, m, rule, q_offset=0):
    return torch.tensor([[rule(q_offset + i, j) for j in range(m)] for i in range(n)])


@pytest.mark.parametrize("w,d", [(1, 1), (5, 1), (4, 3)])
def test_sliding_window_causal_and_dilated(w, d):
    want = _brute(40, 40, lambda i, j: 0 <= i - j < w * d and (i - j) % d == 0)
    assert torch.equal(dense_mask(SlidingWindow(w, dilation=d), 40, 40)[0], want)


def test_sliding_window_two_sided_with_offset():
    want = _brute(10, 30, lambda i, j: abs(i - j) < 4, q_offset=20)
    assert torch.equal(dense_mask(SlidingWindow(4, causal=False), 10, 30, q_offset=20)[0], want)


def test_global_tokens_causal_and_bidirectional():
    assert torch.equal(dense_mask(GlobalTokens(3), 20, 20)[0], _brute(20, 20, lambda i, j: j < 3 and j <= i))
    assert torch.equal(dense_mask(GlobalTokens(3, causal=False), 20, 20)[0],
                       _brute(20, 20, lambda i, j: j < 3 or i < 3))


def test_local_1d_sees_its_block_and_the_memory_before_it():
    want = _brute(50, 50, lambda i, j: j <= i and j >= (i // 8) * 8 - 5)
    assert torch.equal(dense_mask(Local1D(block=8, memory=5), 50, 50)[0], want)


def test_block_raster_round_trip_and_pixel_coordinates():
    img = torch.arange(8 * 12).view(8, 12)
    seq = to_block_raster(img, 2, 4)
    assert torch.equal(from_block_raster(seq, 8, 12, 2, 4), img)
    # The first block is rows 0-1, columns 0-3 in raster order.
    assert seq[:8].tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    r, c, _, _ = Local2D(width=12, block_h=2, block_w=4).pixel(torch.arange(96))
    assert torch.equal(r * 12 + c, seq)


def test_local_2d_is_the_memory_rectangle_in_generation_order():
    p = Local2D(width=12, block_h=2, block_w=4, memory_h=3, memory_w=2)
    seq = to_block_raster(torch.arange(96).view(8, 12), 2, 4)  # position -> raster pixel id

    def rule(i, j):
        ri, ci = divmod(int(seq[i]), 12)
        rj, cj = divmod(int(seq[j]), 12)
        top, left = (ri // 2) * 2, (ci // 4) * 4
        return j <= i and top - 3 <= rj < top + 2 and left - 2 <= cj < left + 4 + 2
    assert torch.equal(dense_mask(p, 96, 96)[0], _brute(96, 96, rule))


@pytest.mark.parametrize("make,words", [
    (lambda: SlidingWindow(0), ["window", "0"]),
    (lambda: SlidingWindow(4, dilation=0), ["dilation", "0"]),
    (lambda: GlobalTokens(0), ["n_global", "0"]),
    (lambda: Local1D(block=0), ["block", "0"]),
    (lambda: Local1D(block=4, memory=-1), ["memory", "-1"]),
    (lambda: Local2D(width=30, block_w=8), ["block_w=8", "width=30"]),
    (lambda: Local2D(width=32, block_h=0), ["block_h", "0"]),
])
def test_invalid_parameters_name_the_value(make, words):
    with pytest.raises(ValueError) as err:
        make()
    assert all(w in str(err.value) for w in words)


def test_non_integer_parameter_is_a_type_error():
    with pytest.raises(TypeError, match="window"):
        SlidingWindow(2.5)
