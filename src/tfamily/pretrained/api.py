"""`tfamily.from_pretrained` and the table of supported architectures (see the package's docstring)."""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from ..spec import Spec
from .load import PretrainedError, Weights, load_into, read_config, read_tensors

# model_type in config.json -> the module that maps it.
FAMILIES = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "bert": "bert", "roberta": "bert", "t5": "t5",
            "longformer": "longformer", "big_bird": "bigbird"}


class Pretrained(NamedTuple):
    model: nn.Module
    spec: Spec


def family(config: dict, path: Path):
    kind = config.get("model_type")
    if kind not in FAMILIES:
        raise PretrainedError(f"{path / 'config.json'} has model_type {kind!r}, which tfamily does not import; "
                              f"supported: {', '.join(FAMILIES)}")
    return importlib.import_module(f"{__package__}.{FAMILIES[kind]}")


def with_mask_id(config: dict, path: Path) -> dict:
    """``config`` with ``mask_token_id`` from the directory's tokenizer.json ([MASK] or <mask>)
    when the config lacks it: the id a masked LM's further training masks with."""
    tok = path / "tokenizer.json"
    if "mask_token_id" in config or not tok.is_file():
        return config
    try:
        added = json.loads(tok.read_text(encoding="utf-8")).get("added_tokens", [])
        ids = [t["id"] for t in added if t.get("content") in ("[MASK]", "<mask>")]
    except (ValueError, AttributeError, KeyError, TypeError):
        return config  # an unreadable tokenizer.json is refused where it is used (tfamily convert)
    return {**config, "mask_token_id": ids[0]} if ids else config


def spec_of(path: str | Path) -> Spec:
    """The spec a checkpoint directory maps to, without reading its weights."""
    path = Path(path).expanduser()
    config = with_mask_id(read_config(path), path)
    return family(config, path).spec(config)


def from_pretrained(path: str | Path, dtype: torch.dtype = torch.float32) -> Pretrained:
    """The model of the Hugging Face checkpoint directory ``path``, built by tfamily, its weights
    loaded and cast to ``dtype``, in eval mode; with its spec."""
    from ..build import build
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}; e.g. torch.bfloat16")
    path = Path(path).expanduser()
    config = with_mask_id(read_config(path), path)
    fam = family(config, path)
    spec = fam.spec(config)
    tensors = read_tensors(path)
    weights = Weights(tensors, fam.PREFIXES, fam.IGNORE)
    state = fam.weights(config, spec, weights)
    model = build(spec).to(dtype)
    load_into(model, state, weights, path)
    return Pretrained(model.eval(), spec)


__all__ = ["from_pretrained", "spec_of", "Pretrained", "PretrainedError", "FAMILIES"]
