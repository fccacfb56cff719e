"""A built model back to a Hugging Face checkpoint directory: ``config.json`` and
``model.safetensors`` as ``save_pretrained`` writes them (and ``tokenizer.json`` when the run
has a subword vocabulary), which ``AutoModelForCausalLM`` / ``AutoModelForMaskedLM`` load.

    tfamily export runs/gpt --format hf --out hf/gpt

The family is the one whose choices the spec makes (learned positions: GPT-2; rotary: Llama,
Mistral with a sliding window; an encoder: BERT, Longformer with global projections; an
encoder-decoder: T5). Its ``FIELDS`` table writes the config and
its ``links`` the weights, the same tables the import reads; the config is then read back
through the import, and any field of the spec the peer cannot express (a sliding-window
GPT-2, XL memory, a learned logit scale, an untied head in a family that ties) is refused by
name. Dropout rates, the initialisation, the kernel and gradient checkpointing change how a
model trains or runs, not what it computes, and are not compared. Before the directory
appears, it is imported again and its logits compared with the model's.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from .. import registry
from ..spec import Spec
from .load import PretrainedError

# Spec fields that do not change the function a model computes (see the module docstring).
UNCOMPARED = ("member", "paper", "dropout", "embed_dropout", "attn_dropout", "ff_dropout", "init", "kernel",
              "depth.checkpointing", "ff.chunks", "objective.params")
# Per axis, the registry whose constructor defaults fill a spec's params.
_PARAMS = {"pattern": registry.PATTERNS, "position": registry.POSITIONS, "residual": registry.RESIDUALS,
           "norm": registry.NORMS, "ff": registry.FEEDFORWARDS}
ATOL = 1e-4


def family_of(spec: Spec):
    """The family module whose architecture the spec's model and position choose."""
    name = spec.member or "this model"
    if spec.model == "encoder":
        fam = "longformer" if spec.heads.global_qkv else "bert"
    elif spec.model == "decoder":
        fam = "llama" if spec.position.name == "rotary" else "gpt2"
    elif spec.model == "encoder_decoder":
        fam = "t5"
    else:
        raise ValueError(f"{name} cannot be exported as a Hugging Face checkpoint: model {spec.model!r} has no "
                         f"peer mapping; supported: decoder (GPT-2, Llama, Mistral), encoder (BERT, Longformer), "
                         f"encoder_decoder (T5)")
    return importlib.import_module(f"{__package__}.{fam}")


def _defaults(reg, name: str) -> dict:
    entry = reg.entry(name)
    return {k: p.default for k, p in inspect.signature(entry.make).parameters.items()
            if p.default is not inspect.Parameter.empty and k not in entry.needs}


def resolved(spec: Spec) -> dict:
    """``spec`` as a dict with every implicit value made explicit: dropout rates per site, d_ff,
    key/value heads and d_head, each part's params with its defaults."""
    d = spec.to_dict()
    for site in ("embed", "attn", "ff"):
        d[f"{site}_dropout"] = spec.dropout_at(site)
    d["ff"]["d_ff"] = spec.d_ff
    d["heads"].update(n_kv_heads=spec.heads.kv_heads, d_head=spec.d_head)
    for axis, reg in _PARAMS.items():
        d[axis]["params"] = {**_defaults(reg, d[axis]["name"]), **d[axis]["params"]}
    for p in d["pattern"]["per_layer"]:
        p["params"] = {**_defaults(registry.PATTERNS, p["name"]), **p["params"]}
    if d["state"]["name"] == "none":  # no state and a KV cache compute the same logits
        d["state"]["name"] = "kv_cache"
    return d


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if key in UNCOMPARED:
            continue
        if isinstance(v, dict) and not key.endswith("params"):
            out.update(_flat(v, f"{key}."))
        else:
            out[key] = v
    return out


def hf_config(spec: Spec) -> tuple[dict, object]:
    """(config.json, family module) for ``spec``; refuses the first field the peer has no mapping for."""
    fam = family_of(spec)
    if spec.objective.name == "masked_lm" and "mask_id" not in spec.objective.params:
        # The [MASK] row the objective appends (objectives/mlm.py) is one more token of the peer's vocabulary.
        spec = spec.override({"vocab_size": spec.vocab_size + 1, "objective.params": {"mask_id": spec.vocab_size}})
    ours = resolved(spec)
    config = fam.config(ours)
    try:
        back = resolved(fam.spec(config))
    except (PretrainedError, ValueError, TypeError) as e:
        raise ValueError(f"{spec.member or 'this model'} cannot be exported as {config['model_type']}: {e}") from e
    want, got = _flat(ours), _flat(back)
    for key in want:
        if want[key] != got.get(key):
            raise ValueError(f"{spec.member or 'this model'} cannot be exported as a Hugging Face "
                             f"{config['model_type']}: spec field {key}={want[key]!r} has no mapping (the peer's "
                             f"architecture fixes {got.get(key)!r}); export a model with {key}={got.get(key)!r}")
    return config, fam


def check_out(out: str | Path) -> Path:
    path = Path(out).expanduser()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"--out {path} exists and is not an empty directory; pick a new directory")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"--out {path}: its parent {path.parent} does not exist; create it first")
    return path


def export_hf(model: nn.Module, out: str | Path, vocab=None) -> dict:
    """Write ``model`` (built by tfamily, carrying ``model.spec``) as a Hugging Face checkpoint
    directory ``out`` (new or empty); ``vocab``: the run's vocabulary, written as tokenizer.json
    when it is a subword one. Checked by importing it again; returns a summary."""
    from . import from_pretrained
    spec: Spec = model.spec
    config, fam = hf_config(spec)
    spec = fam.spec(config).replace(member=spec.member)  # the mask id explicit, as the weights' names need
    path = check_out(out)
    model = model.eval()
    dtype = next(model.parameters()).dtype
    config["dtype"] = str(dtype).removeprefix("torch.")
    prefix = fam.PREFIXES[0] if fam.PREFIXES else ""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    tensors = {(n if n.startswith(("lm_head.", "cls.")) else prefix + n): t.contiguous().clone()
               for n, t in fam.hf_weights(spec, state).items()}
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{path.name}-", dir=path.parent))
    try:
        from safetensors.torch import save_file
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if getattr(vocab, "name", None) == "tokenizer":
            (tmp / "tokenizer.json").write_text(vocab.json, encoding="utf-8")
        diff = _compare(model, from_pretrained(tmp, dtype=dtype).model)
        path.mkdir(exist_ok=True)
        for f in tmp.iterdir():
            os.replace(f, path / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"member": spec.member, "format": "hf", "model_type": config["model_type"], "path": str(path),
            "files": sorted(f.name for f in path.iterdir()), "max_abs_diff": diff}


def _compare(model: nn.Module, back: nn.Module, seed: int = 0) -> float:
    gen = torch.Generator().manual_seed(seed)
    n = min(16, getattr(getattr(model, "position", None), "max_len", 16) or 16)
    ids = torch.randint(0, model.embed.vocab_size, (2, n), generator=gen).to(next(model.parameters()).device)
    args = (ids, ids[:, : n // 2]) if model.spec.model == "encoder_decoder" else (ids,)  # source, target
    with torch.no_grad():
        diff = float((model(*args).float() - back.to(ids.device)(*args).float()).abs().max())
    if not diff <= ATOL * (1 if next(model.parameters()).dtype == torch.float32 else 100):
        raise ValueError(f"the exported checkpoint's logits differ from the model's by {diff:.3g}; nothing was "
                         f"written (report this as a bug)")
    return diff
