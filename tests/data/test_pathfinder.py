"""Pathfinder images: balanced, deterministic per seed, and labelled as a flood fill says."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest
import torch

from tfamily.data.synthetic.pathfinder import DOT, Pathfinder


def same_piece(image: np.ndarray) -> bool:
    """Whether the two dots are 8-connected through non-background pixels (breadth-first fill)."""
    dots = [tuple(p) for p in np.argwhere(image == DOT)]
    assert len(dots) == 2
    seen, todo = {dots[0]}, deque([dots[0]])
    while todo:
        y, x = todo.popleft()
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                p = (y + dy, x + dx)
                if 0 <= p[0] < image.shape[0] and 0 <= p[1] < image.shape[1] and image[p] and p not in seen:
                    seen.add(p)
                    todo.append(p)
    return dots[1] in seen


@pytest.mark.parametrize("side", [16, 32])
def test_labels_are_true_balanced_and_deterministic(side):
    task = Pathfinder(side)
    x, y = task.sample(128, torch.Generator().manual_seed(3))
    assert x.shape == (128, side * side) and set(x.unique().tolist()) == {0, 1, 2}
    assert 0.35 < y.float().mean() < 0.65
    for image, label in zip(x.view(-1, side, side).numpy(), y.tolist()):
        assert same_piece(image) == bool(label)
    again = task.sample(128, torch.Generator().manual_seed(3))
    other = task.sample(128, torch.Generator().manual_seed(4))
    assert torch.equal(x, again[0]) and torch.equal(y, again[1]) and not torch.equal(x, other[0])


def test_bad_sizes_are_refused_in_one_line():
    with pytest.raises(ValueError, match="pathfinder side must be an integer >= 8, got 4"):
        Pathfinder(4)
    with pytest.raises(ValueError, match="do not fit a 8x8 image"):
        Pathfinder(8, length=40, n_paths=4).sample(1, torch.Generator().manual_seed(0))
