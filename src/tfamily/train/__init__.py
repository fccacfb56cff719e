"""Training: one loop driving a Task; configs, checkpoints, logging, distributed runs, the CLI.

    from tfamily.train import load, train
    result = train(load("demo", ["train.max_steps=500"]))

Attributes are imported lazily so that `tfamily --help` does not load torch.
"""
from __future__ import annotations

import importlib

_LAZY = {"Config": "config", "load": "config", "Trainer": "loop", "train": "fit", "resume_config": "fit",
         "Task": "task", "make_task": "tasks",
         "NonFiniteLoss": "loop", "load_trained": "sample", "evaluate_trained": "sample", "sample_text": "sample"}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'tfamily.train' has no attribute {name!r}")
