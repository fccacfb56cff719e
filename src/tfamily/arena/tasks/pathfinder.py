"""``pathfinder`` (Linsley et al. 2018; LRA section 3.5): whether two dots of a ``length`` x ``length``
image (16 or 32, any side >= 8) lie on one path, among distractor paths
(``data/synthetic/pathfinder.py``), read in raster order (``length ** 2`` tokens: background, path,
dot), balanced. Long-range: the dots are a path apart, and a path's pixels in successive rows are
``length`` positions apart."""
from __future__ import annotations

from .base import HELD_OUT, Declared, classify, generator, register


def make(side: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
    import torch

    from ...data.synthetic.pathfinder import Pathfinder
    from ...train.tasks.classify import Examples
    task = Pathfinder(side)
    every = torch.ones(1, side * side, dtype=torch.bool)

    def draw(rows: int, g: torch.Generator) -> dict:
        x, y = task.sample(rows, g)
        return {"x": x, "y": y, "key_padding": every.expand(rows, -1)}

    held = [draw(eval_examples, generator(HELD_OUT + i, 0)) for i in (1, 2)]
    val, test = (Examples(h["x"], h["y"], h["key_padding"]) for h in held)
    return classify("pathfinder", (draw, val, test, task.vocab_size, task.n_classes), batch_size=batch_size,
                    seed=seed)


def _at_least_8(side: int) -> str | None:
    return None if side >= 8 else "is the image side: give at least 8, e.g. 16 or 32"


TASK = register(Declared("pathfinder", 16, make, checks=(_at_least_8,), image=True))
