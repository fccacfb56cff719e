"""What a run trains on, decided at its start: the task the config's ``data`` names, with what the
member decides about it (``resolve.stream``: a member whose state crosses segments streams)."""
from __future__ import annotations

import dataclasses

from torch import nn

from ..spec import Spec
from . import resolve
from .distributed import Dist
from .task import Task
from .tasks import make_task


def task_for(cfg, dist: Dist, data_dir, spec: Spec | None, model: nn.Module | None, vocab,
             notes: list[str]) -> tuple[object, Task]:
    """The config, with the member's decisions, and the task it names for this rank. ``spec`` or
    ``model``: the run's, when given instead of ``cfg.member``; ``vocab``: a fine-tuned run's
    (``finetune.vocab``); ``notes``: a line is appended for each decision."""
    t = cfg.train
    spec_dict = spec.to_dict() if spec is not None else resolve.member_dict(cfg) if model is None else None
    if spec_dict is not None:  # a member whose state crosses segments streams by default
        streams, note = resolve.stream(cfg, spec_dict)
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, stream=streams))
        notes += [note] if note else []
    objective = spec_dict["objective"]["name"] if model is None and spec is None else None
    return cfg, make_task(cfg.data, t.batch_size // dist.world_size, seed=t.seed, rank=dist.rank,
                          world_size=dist.world_size, data_dir=data_dir, objective=objective, vocab=vocab)
