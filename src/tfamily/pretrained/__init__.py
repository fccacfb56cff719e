"""Start from a pretrained checkpoint: a local Hugging Face directory (``config.json`` and
``model.safetensors``) becomes a built tfamily model and its spec.

    model, spec = tfamily.from_pretrained("path/to/gpt2")

Each supported architecture is one small module mapping its config to a ``Spec`` (the choices
it makes on each axis) and its weights to the built model's names; ``load`` reads and checks.
No network, and never a pickle. ``tfamily convert`` writes the result as a tfamily checkpoint.
"""
from __future__ import annotations

import importlib

# Resolved on first use: importing the package (as `tfamily convert --help` does, through
# tfamily.pretrained.cli) must not import torch.
_LAZY = {"FAMILIES": "api", "Pretrained": "api", "family": "api", "with_mask_id": "api", "spec_of": "api",
         "from_pretrained": "api", "PretrainedError": "load", "Weights": "load", "load_into": "load",
         "read_config": "load", "read_tensors": "load"}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
