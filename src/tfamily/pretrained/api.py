"""`tfamily.from_pretrained` and the table of supported architectures (see the package's docstring)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from .. import registry
from ..data.tokenizer import TOKENIZER_BYTES
from ..base.numbers import cut
from ..spec import Spec
from ..base.textload import read_json
from . import families
from .load import PretrainedError, Weights, load_into, read_config, read_tensors



class Pretrained(NamedTuple):
    model: nn.Module
    spec: Spec


def family(config: dict, path: Path) -> families.Family:
    """The family module of the checkpoint's ``model_type`` (``registry.PRETRAINED``)."""
    kind = config.get("model_type")
    if not isinstance(kind, str) or kind not in registry.PRETRAINED:
        raise PretrainedError(f"{path / 'config.json'} has model_type {cut(kind)}, which tfamily does not import; "
                              f"supported: {', '.join(registry.PRETRAINED.in_order())}")
    return families.family(kind)


def __getattr__(name: str):
    if name == "FAMILIES":  # model_type in config.json -> the module that maps it, read from the registry
        return dict(families.table())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def with_mask_id(config: dict, path: Path) -> dict:
    """``config`` with ``mask_token_id`` from the directory's tokenizer.json ([MASK] or <mask>)
    when the config lacks it: the id a masked LM's further training masks with."""
    tok = path / "tokenizer.json"
    if "mask_token_id" in config or not tok.is_file():
        return config
    try:
        added = read_json(tok, limit=TOKENIZER_BYTES).get("added_tokens", [])
    except ValueError:
        return config  # an unreadable tokenizer.json is refused where it is used (tfamily convert)
    ids = [t["id"] for t in (added if isinstance(added, list) else [])
           if isinstance(t, dict) and t.get("content") in ("[MASK]", "<mask>") and isinstance(t.get("id"), int)]
    return {**config, "mask_token_id": ids[0]} if ids else config


def spec_from(config: dict, path: Path, *, fits: bool = True) -> tuple[Spec, object]:
    """(spec, family module) of the checkpoint directory ``path``'s config; with ``fits``, refused by
    the size check before anything is built per layer (a 200-byte config.json can ask for 10^8
    layers). A wrong value is one line naming the file."""
    from ..spec.sizes import check_fits
    fam = family(config, path)
    where = path / "config.json"
    try:
        spec = fam.spec(config)
        if fits:
            check_fits(spec)
    except (ValueError, TypeError) as e:  # the spec's own checks name the spec field; say which file set it
        msg = str(e)
        raise PretrainedError(msg if str(where) in msg else f"{where}{msg.removeprefix('config.json')}"
                              if msg.startswith("config.json") else f"{where}: {msg}") from e
    return spec, fam


_LAYER = re.compile(r"(.*?)\.(\d+)\.")  # h.3.ln_1.weight, layers.3..., encoder.block.3...: the layer index


def check_weights(weights: Weights, spec: Spec, path: Path) -> None:
    """Refuse, before any per-layer mapping, a layer count the weight names do not have and a
    tensor that is not a finite float (an integer table or a NaN would load and fail much later)."""
    held: dict[str, int] = {}
    for name in weights.tensors:
        m = _LAYER.match(name)
        if m:
            held[m[1]] = max(held.get(m[1], 0), int(m[2]) + 1)
    n = max(spec.depth.n_layers, spec.depth.n_enc_layers or 0)
    most = max(held.values(), default=0)
    if n > most:
        stack = max(held, key=held.get) if held else None
        have = f"{most} ({stack}.0 to {stack}.{most - 1})" if stack else "none"
        raise PretrainedError(f"{path / 'config.json'} asks for {n} layers but the weights hold {have}; the config "
                              f"and weights are from different models: save both with save_pretrained")
    for name, t in weights.tensors.items():
        if not t.is_floating_point():
            raise PretrainedError(f"{path}: weight {name!r} is {str(t.dtype).removeprefix('torch.')}, not a float "
                                  f"tensor; the file is corrupt or not a model's weights: save it again")
        if not bool(torch.isfinite(t).all()):
            raise PretrainedError(f"{path}: weight {name!r} holds NaN or infinite values; the checkpoint is "
                                  f"broken (a diverged run or a corrupt file): use another")


def spec_of(path: str | Path) -> Spec:
    """The spec a checkpoint directory maps to, without reading its weights."""
    path = Path(path).expanduser()
    config = with_mask_id(read_config(path), path)
    return spec_from(config, path, fits=False)[0]  # a spec is a description: any size may be read


def from_pretrained(path: str | Path, dtype: torch.dtype = torch.float32) -> Pretrained:
    """The model of the Hugging Face checkpoint directory ``path``, built by tfamily, its weights
    loaded and cast to ``dtype``, in eval mode; with its spec."""
    from ..build import build
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}; e.g. torch.bfloat16")
    path = Path(path).expanduser()
    config = with_mask_id(read_config(path), path)
    spec, fam = spec_from(config, path)
    tensors = read_tensors(path, spec.model)
    weights = Weights(tensors, fam.PREFIXES, fam.IGNORE, dtype)
    check_weights(weights, spec, path)
    state = fam.weights(config, spec, weights)
    model = build(spec).to(dtype)
    load_into(model, state, weights, path)
    return Pretrained(model.eval(), spec)


__all__ = ["from_pretrained", "spec_of", "Pretrained", "PretrainedError", "FAMILIES"]
