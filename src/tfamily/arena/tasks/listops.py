"""``listops`` (Tay et al. 2021, section 3.1; the generator of ``data/synthetic/listops.py`` with LRA's
grammar): the value 0-9 of a nested MAX/MIN/MED/SM expression, right-padded to ``length`` tokens, with
LRA's length ratio (its expressions have 500 to 2000 tokens: here ``length // 4`` to ``length``).
Long-range: an operator's value depends on arguments that may be hundreds of tokens away, closed by a
bracket at the end."""
from __future__ import annotations

from .base import HELD_OUT, Declared, classify, generator, register


def make(length: int, *, batch_size: int, seed: int, eval_examples: int, data_dir=None):
    from ...data.synthetic.listops import ListOpsTask
    from ...train.tasks.classify import Examples
    task = ListOpsTask(min_length=max(1, length // 4), max_length=length)

    def draw(rows: int, g) -> dict:
        b = task.sample(rows, g)
        return {"x": b.input, "y": b.target, "key_padding": b.valid}

    held = [draw(eval_examples, generator(HELD_OUT + i, 0)) for i in (1, 2)]
    val, test = (Examples(h["x"], h["y"], h["key_padding"]) for h in held)
    return classify("listops", (draw, val, test, task.vocab_size, task.n_classes), batch_size=batch_size, seed=seed)


TASK = register(Declared("listops", 256, make))
