"""One call for a whole run: ``train(cfg)`` builds the ``Trainer`` (``loop.py``), fits it and closes it;
``resume_config(run)`` reads the config a checkpoint was saved with, to continue that run."""
from __future__ import annotations

from pathlib import Path

from . import checkpoint
from .config import Config, apply_overrides, from_dict
from .loop import Trainer


def resume_config(path: str | Path, overrides: dict | None = None) -> Config:
    """The config saved with the checkpoint at ``path`` with dotted ``overrides`` on top
    (e.g. ``{"train.max_steps": 4000}`` to train longer)."""
    return from_dict(apply_overrides(checkpoint.load(path).meta["config"], overrides or {}))


def train(cfg: Config, *, data_dir=None, resume=None) -> dict:
    """Train ``cfg`` (or continue the run at ``resume``) and return the result dict."""
    trainer = Trainer(cfg, data_dir=data_dir, resume=resume)
    try:
        result = trainer.fit()
    except BaseException:
        trainer.close(sync=False)
        raise
    trainer.close()
    return result
