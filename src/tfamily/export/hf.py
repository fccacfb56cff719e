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

import contextlib
import inspect
import json
import os
from pathlib import Path

import torch
from torch import nn

from .. import registry
from ..base.files import replace_dir, same_mode
from ..spec import Spec
from ..pretrained import families
from ..pretrained.load import PretrainedError

# Spec fields that do not change the function a model computes (see the module docstring).
UNCOMPARED = ("member", "paper", "dropout", "embed_dropout", "attn_dropout", "ff_dropout", "init", "kernel",
              "depth.checkpointing", "ff.chunks", "objective.params")
# Per axis, the registry whose constructor defaults fill a spec's params.
_PARAMS = {"pattern": registry.PATTERNS, "position": registry.POSITIONS, "residual": registry.RESIDUALS,
           "norm": registry.NORMS, "ff": registry.FEEDFORWARDS}
ATOL = 1e-4


def family_of(spec: Spec) -> families.Exports:
    """The exporting family (``pretrained/families.py``) that says it ``exports`` the spec: the one
    whose architecture the spec's model and position choose."""
    claim = [fam for fam in families.exporting() if fam.exports(spec)]
    if len(claim) > 1:
        raise ValueError(f"families {', '.join(f.__name__ for f in claim)} all claim to export {spec.member or 'this'} "
                         f"model; make their exports() tell it apart")
    if not claim:
        kinds: dict[str, list[str]] = {}
        for fam in families.exporting():
            kinds.setdefault(fam.MODEL, []).append(fam.TITLE)
        supported = ", ".join(f"{kind} ({', '.join(titles)})" for kind, titles in kinds.items())
        raise ValueError(f"{spec.member or 'this model'} cannot be exported as a Hugging Face checkpoint: model "
                         f"{spec.model!r} has no peer mapping; supported: {supported}")
    return claim[0]


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


def hf_config(spec: Spec, source: str | Path | None = None) -> tuple[dict, object]:
    """(config.json, family module) for ``spec`` (read from the file ``source``, named in a refusal);
    refuses every field the peer has no mapping for, at once."""
    fam = family_of(spec)
    peer = fam.__name__.rsplit(".", 1)[-1]
    if spec.objective.name == "masked_lm" and "mask_id" not in spec.objective.params:
        # The [MASK] row the objective appends (objectives/mlm.py) is one more token of the peer's vocabulary.
        spec = spec.override({"vocab_size": spec.vocab_size + 1, "objective.params": {"mask_id": spec.vocab_size}})
    ours = resolved(spec)
    try:
        config = fam.config(ours)
        back = resolved(fam.spec(config))
    except (PretrainedError, ValueError, TypeError, KeyError) as e:
        why = _lacking(ours, peer, e.args[0]) if isinstance(e, KeyError) else e
        raise ValueError(f"{_named(spec, source)} cannot be exported as a Hugging Face {peer}: {why}; "
                         f"{_as_graph(spec)}") from e
    want, got = _flat(ours), _flat(back)
    differ = [key for key in want if want[key] != got.get(key)]
    if differ:
        raise ValueError(_no_mapping(spec, source, config["model_type"], want, got, differ))
    return config, fam


def _lacking(ours: dict, peer: str, key) -> str:
    """Why the peer's config found no ``key``: the part that has it is another choice than the spec's."""
    for axis, reg in _PARAMS.items():
        for name in reg.names():
            if key in _defaults(reg, name) and ours[axis]["name"] != name:
                return f"{peer} needs {axis}.name={name!r} (for its {key}), and the spec has {ours[axis]['name']!r}"
    return f"{peer} needs {key!r}, which this spec's choices do not give"


def _named(spec: Spec, source) -> str:
    return (spec.member or "this model") + (f" (its spec in {source})" if source else "")


def _graphs(spec: Spec) -> list[str]:
    from .graphs import FORMATS, refusal
    return [f for f in FORMATS if refusal(spec, f) is None]


def _as_graph(spec: Spec) -> str:
    graphs = _graphs(spec)
    return (f"export it as a graph instead (--format {' or '.join(graphs)})" if graphs else
            "no export format takes it")


def _no_mapping(spec: Spec, source, peer: str, want: dict, got: dict, keys: list[str]) -> str:
    """Every field the peer fixes otherwise, and both fixes: a graph format, or a model trained with
    the peer's values (one changed field is rarely enough: Transformer-XL differs from GPT-2 in several)."""
    renamed = {k.rsplit(".", 1)[0] for k in keys if k.endswith(".name")}
    # An axis whose choice differs brings its own params: only its name is worth saying.
    keys = [k for k in keys if not (k.endswith(".params") and k.removesuffix(".params") in renamed)]
    fixed = {k: "none" if k == "state.name" and got.get(k) == "kv_cache" else got.get(k) for k in keys}  # resolved()
    if registry.KERNELS.entry(spec.kernel.name).info.get("shared_qk") and fixed.get("heads.shared_qk") is False:
        fixed["kernel.name"] = "sdpa"
    fields = [(f"{k}={want[k]!r}", f"({peer} fixes {fixed[k]!r})") for k in keys]
    what = f"spec field {fields[0][0]} has no mapping {fields[0][1]}" if len(keys) == 1 else \
        f"{len(keys)} spec fields have no mapping: {', '.join(f'{a} {b}' for a, b in fields)}"
    overrides = " ".join(f"model.{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in fixed.items())
    fixes = [_as_graph(spec)] if _graphs(spec) else []
    fixes.append(f"train a model with {overrides} to export it as {peer}")
    return f"{_named(spec, source)} cannot be exported as a Hugging Face {peer}: {what}; {', or '.join(fixes)}"


def check_out(out: str | Path, force: bool = False) -> Path:
    """``out`` as a directory to create (with its missing parents, as save_pretrained does): an empty
    one may exist, an existing one with files is replaced only with ``force``; never inside a run's
    checkpoints."""
    from .graphs import refuse_checkpoints
    path = Path(out).expanduser()
    above = next(d for d in path.parents if d.exists())
    if not above.is_dir():
        raise NotADirectoryError(f"--out {path}: {above} is a file, not a directory; pick another path")
    refuse_checkpoints(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"--out {path} exists and is not an empty directory (a file); pick a new "
                              f"directory")
    if path.is_dir() and any(path.iterdir()):
        if not force:
            raise FileExistsError(f"--out {path} exists and is not an empty directory; pick a new directory, "
                                  f"or pass --force to replace it")
        inner = next((p for p in sorted(path.iterdir()) if p.is_dir()), None)
        if inner is not None:
            raise FileExistsError(f"--out {path} exists and is not an empty directory, and --force replaces "
                                  f"only a directory of files (like a Hugging Face checkpoint), not one "
                                  f"holding {inner.name}/; pick a new directory")
    if not os.access(above, os.W_OK | os.X_OK):
        raise PermissionError(f"--out {path} cannot be created: {above} is not writable; pick a writable "
                              f"directory")
    return path


def export_hf(model: nn.Module, out: str | Path, vocab=None, force: bool = False,
              source: str | Path | None = None) -> dict:
    """Write ``model`` (built by tfamily, carrying ``model.spec``) as a Hugging Face checkpoint
    directory ``out`` (new, empty, or replaced with ``force``); ``vocab``: the run's vocabulary,
    written as tokenizer.json when it is a subword one; ``source``: the file the spec came from, named
    in a refusal. Checked by importing it again; returns a summary. A failure, a full disk included,
    leaves nothing behind."""
    from .graphs import bytes_needed, staging, tensor_bytes
    from ..pretrained import from_pretrained
    spec: Spec = model.spec
    config, fam = hf_config(spec, source)
    spec = fam.spec(config).replace(member=spec.member)  # the mask id explicit, as the weights' names need
    path = check_out(out, force)
    model = model.eval()
    dtype = next(model.parameters()).dtype
    config["dtype"] = str(dtype).removeprefix("torch.")
    prefix = fam.PREFIXES[0] if fam.PREFIXES else ""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    tensors = {(n if n.startswith(("lm_head.", "cls.")) else prefix + n): t.contiguous().clone()
               for n, t in fam.hf_weights(spec, state).items()}
    text = {"config.json": json.dumps(config, indent=2) + "\n"}
    if getattr(vocab, "name", None) == "tokenizer":
        text["tokenizer.json"] = vocab.json
    need = bytes_needed(tensor_bytes(tensors.values()) + sum(len(t.encode()) for t in text.values()))
    made = [d for d in reversed(path.parents) if not d.exists()]
    for d in made:
        d.mkdir()
    try:
        with staging(path, need, f"the hf export {path.name}") as tmp:
            from safetensors.torch import save_file
            for name, t in text.items():
                (tmp / name).write_text(t, encoding="utf-8")
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            same_mode(tmp / "config.json", [tmp / "model.safetensors"])
            diff = _compare(model, from_pretrained(tmp, dtype=dtype).model)
            replace_dir(tmp, path)
    except BaseException:
        for d in reversed(made):  # the parents this export created, if still empty
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
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
