"""A reproduction's ``Task`` (``train/task.py``): batches drawn one after another from one
generator, and the shared loop set to the recipe the reproduction states.

``StreamTask`` calls ``draw(generator)`` for each training batch, so batch t depends on every
draw before it, as in a paper's own data pipeline (a sampler of variable-length pairs, a
random position offset per row); its position is the generator's state and the step count, so
a resumed run sees the batches it would have. ``held_out()`` gives the loop's evaluation
batches, ``metrics(loss)`` the reproduction's own numbers for them.

``loop_config`` is the ``Config`` of such a run: Adam without weight decay in torch's
per-tensor steps (``train.fused=false``: the fused kernel rounds differently), the gradient
norm clipped at 1, a linear warm-up over ``warmup`` steps to a constant rate (``WarmupCosine``
with ``min_lr_ratio`` 1; its warm-up reaches 1 one step later than ``min(1, (s + 1) / w)``,
hence ``warmup - 1``), fp32, torch's thread count as the reproduction set it (``--threads``;
a reduction split over other threads rounds differently). On this recipe a reproduction learns the same weights bit for bit
as a plain loop of those steps with the same seed (each reproduction's tests keep its former
loop as that flat reference).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch

from ..settings.run import Config, DataConfig, TrainConfig, validate


class StreamTask:
    kind, vocab, carries_state = "repro", None, False

    def __init__(self, name: str, draw: Callable[[torch.Generator], dict], *, seed: int, unit: str,
                 size: Callable[[dict], int], held_out: Callable[[], Iterable[dict]], eval_units: int,
                 metrics: Callable[[float], dict] | None = None, vocab_size: int = 0, seq_len: int = 1):
        self.name, self.draw, self.seed, self.unit = name, draw, seed, unit
        self._size, self.held_out, self.eval_units, self.metrics = size, held_out, eval_units, metrics
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.generator = torch.Generator().manual_seed(seed)
        self.step = 0

    def next(self) -> dict:
        self.step += 1
        return self.draw(self.generator)

    def size(self, batch: dict) -> int:
        return self._size(batch)

    def carry(self, state) -> None:
        """Batches are independent: nothing is carried."""

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        yield from self.held_out()

    def eval_size(self, max_units: int | None) -> int:
        return self.eval_units

    def eval_metrics(self, loss: float) -> dict:
        return self.metrics(loss) if self.metrics is not None else {}

    def state_dict(self) -> dict:
        return {"type": "stream", "task": self.name, "seed": self.seed, "step": self.step,
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        want = {"type": "stream", "task": self.name, "seed": self.seed}
        diffs = [f"{k}: saved {state.get(k)!r}, here {v!r}" for k, v in want.items() if state.get(k) != v]
        if diffs:
            raise ValueError(f"the checkpoint's data position does not fit this run ({'; '.join(diffs)})")
        self.generator.set_state(state["generator"])
        self.step = int(state["step"])


def loop_config(name: str, run_dir: str | Path, *, steps: int, seconds: float | None, lr: float, seed: int,
                batch_size: int, warmup: int = 1, betas=(0.9, 0.999), eval_every: int | None = None,
                device: str = "cpu") -> Config:
    """The shared loop's settings for one run of a reproduction (see the module docstring);
    ``warmup`` 1: the full rate from the first step. ``run_dir`` is a cell of the one grid
    runner, emptied and planned by ``train/grid.run_cells`` before the run."""
    train = TrainConfig(batch_size=batch_size, max_steps=steps, time_budget=seconds, lr=lr, min_lr_ratio=1.0,
                        warmup=warmup - 1, weight_decay=0.0, betas=tuple(betas), eps=1e-8, fused=False,
                        grad_clip=1.0, precision="fp32", device=device, threads=None, seed=seed, eval_every=eval_every,
                        eval_tokens=None, log_every=10, ckpt_every=None, keep=1, out=str(run_dir),
                        tensorboard=False, progress=False)
    cfg = Config(member=name, name=name, data=DataConfig(corpus=None, task=name), train=train)
    validate(cfg)
    return cfg
