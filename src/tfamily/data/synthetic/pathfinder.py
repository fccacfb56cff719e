"""Pathfinder, procedurally (Linsley et al. 2018; Long Range Arena's task, Tay et al. 2021, section 3.5):
is there a path between the two dots of a ``side`` x ``side`` image?

An image holds ``n_paths`` curved paths of ``length`` pixels each (one target path and distractors)
and two dots. Connected (label 1): the dots sit at the two ends of the target path. Not connected
(label 0): one dot ends the target path, the other ends a distractor. A path is a random walk
with momentum: its heading turns by a normal angle (``curvature`` radians) per step of 0.9 pixel,
rounded to the grid, so consecutive pixels touch (8-neighbours) and a path is one connected
piece. A path never comes within one pixel of another (a walk that would is redrawn), so the
dots are connected exactly when they are on one path: the label is true by construction, and the
tests check it against a flood fill.

Pixels are tokens: 0 background, 1 path, 2 dot; an image is read in raster order (``side ** 2``
tokens). The label is drawn first (balanced) and everything is a function of the generator, so
an image is deterministic per seed. Long-range: in raster order, neighbouring pixels of a path in
successive rows are ``side`` positions apart, and a path of ``length`` pixels spans many rows.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ...base.numbers import check_int, check_number

BACKGROUND, PATH, DOT = 0, 1, 2
STEP = 0.9  # < 1 pixel: a rounded step moves at most one pixel in each direction


def _walk(rng: np.random.Generator, side: int, length: int, blocked: np.ndarray, curvature: float,
          tries: int = 20) -> list[tuple[int, int]] | None:
    """A path of ``length`` distinct pixels avoiding ``blocked``, or None after ``tries`` starts."""
    for _ in range(tries):
        y, x = rng.uniform(0, side, 2)
        start = (int(y), int(x))
        if blocked[start]:
            continue
        pixels, seen, heading = [start], {start}, rng.uniform(0, 2 * math.pi)
        pos = np.array([start[0] + 0.5, start[1] + 0.5])
        for _ in range(8 * length):
            if len(pixels) == length:
                return pixels
            heading += rng.normal(0.0, curvature)
            nxt = pos + STEP * np.array([math.sin(heading), math.cos(heading)])
            cell = (int(math.floor(nxt[0])), int(math.floor(nxt[1])))
            if not (0 <= cell[0] < side and 0 <= cell[1] < side) or blocked[cell]:
                heading += math.pi / 2 * rng.choice((-1, 1))  # turn away from the edge or the other path
                continue
            pos = nxt
            if cell not in seen and all(abs(cell[0] - p[0]) <= 1 and abs(cell[1] - p[1]) <= 1 for p in pixels[-1:]):
                pixels.append(cell)
                seen.add(cell)
            elif cell not in seen:  # a rounded jump of two pixels: step back onto the path
                pos = np.array([pixels[-1][0] + 0.5, pixels[-1][1] + 0.5])
    return None


def _grow(mask: np.ndarray) -> np.ndarray:
    """``mask`` dilated by one pixel (8-neighbours)."""
    out = mask.copy()
    padded = np.pad(mask, 1)
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            out |= padded[1 + dy:1 + dy + mask.shape[0], 1 + dx:1 + dx + mask.shape[1]]
    return out


def draw_image(rng: np.random.Generator, side: int, connected: bool, *, length: int, n_paths: int,
               curvature: float) -> np.ndarray:
    """One ``side`` x ``side`` int8 image (the module docstring); redrawn until every path fits."""
    for _ in range(200):
        image, paths = np.zeros((side, side), dtype=np.int8), []
        for _ in range(n_paths):
            path = _walk(rng, side, length, _grow(image > 0), curvature)
            if path is None:
                break
            paths.append(path)
            image[tuple(np.array(path).T)] = PATH
        if len(paths) == n_paths:
            image[paths[0][0]] = DOT
            image[paths[0][-1] if connected else paths[1][-1]] = DOT
            return image
    raise ValueError(f"pathfinder: {n_paths} paths of {length} pixels do not fit a {side}x{side} image; "
                     f"lower length or n_paths")


class Pathfinder:
    """Balanced Pathfinder images at ``side`` (default path length: ``3 * side // 4`` pixels, with
    ``n_paths`` 2 at side < 24, else 3). ``sample(rows, generator)`` -> (x (rows, side ** 2) tokens,
    y (rows,) labels 0/1)."""

    vocab_size, n_classes = 3, 2

    def __init__(self, side: int = 16, length: int | None = None, n_paths: int | None = None,
                 curvature: float = 0.35):
        self.side = check_int("pathfinder side", side, 8, hint="e.g. 16 or 32")
        self.length = check_int("pathfinder length", length if length is not None else 3 * side // 4, 2)
        self.n_paths = check_int("pathfinder n_paths", n_paths if n_paths is not None else 2 if side < 24 else 3, 2)
        self.curvature = check_number("pathfinder curvature", curvature, 0.0)

    def sample(self, rows: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        seed = int(torch.randint(2**62, (1,), generator=generator))
        rng = np.random.default_rng(seed)
        y = rng.integers(0, 2, rows)
        x = np.stack([draw_image(rng, self.side, bool(c), length=self.length, n_paths=self.n_paths,
                                 curvature=self.curvature).reshape(-1) for c in y])
        return torch.from_numpy(x).long(), torch.from_numpy(y).long()
