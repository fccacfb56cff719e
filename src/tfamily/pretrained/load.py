"""Reading a Hugging Face checkpoint directory (``config.json`` plus safetensors, as
``save_pretrained`` writes it) into a built tfamily model, offline and without unpickling.

A family module (``gpt2``, ``llama``, ``bert``) maps the config to a ``Spec`` and the weights
to the built model's names; this module reads the files, checks every name and shape, and
loads. Every refusal is one line naming the field, file or weight and the fix.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from ..base.numbers import cut
from ..train.transfer import tied as _tied
from ..base.textload import expect, read_json, require

if TYPE_CHECKING:
    from ..spec import Spec

# The transformers class that keeps each model kind's head: AutoModel would save the trunk alone,
# which tfamily then refuses for the missing head.
HEAD_CLASSES = {"decoder": "AutoModelForCausalLM", "encoder": "AutoModelForMaskedLM",
                "encoder_decoder": "AutoModelForSeq2SeqLM"}
# Hugging Face's activation names (transformers' ACT2FN) and the tfamily activation each one is.
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                  "silu": "silu", "swish": "silu"}


def activations(*names: str) -> dict[str, str]:
    """The names of ``HF_ACTIVATIONS`` a family's configs use, in the family's order: the first
    name that maps to a tfamily activation is the one its export writes (its peer's usual name)."""
    return {n: HF_ACTIVATIONS[n] for n in names}


def _fix_bin(model: str | None) -> str:
    """How to turn a pickled checkpoint of tfamily model kind ``model`` into safetensors."""
    cls = HEAD_CLASSES.get(model or "", "AutoModelForCausalLM (or ForMaskedLM, ForSeq2SeqLM: the one with the head)")
    return (f"convert it once with transformers: {cls}.from_pretrained(DIR).save_pretrained(DIR) writes "
            f"model.safetensors")


class PretrainedError(ValueError):
    """A directory that cannot be read as a Hugging Face checkpoint, or does not fit tfamily."""


def read_config(path: Path) -> dict:
    """``config.json`` of the checkpoint directory ``path``."""
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; pass the directory save_pretrained wrote")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise PretrainedError(f"{path} is not a Hugging Face checkpoint directory (no config.json); pass the "
                              f"directory save_pretrained wrote (config.json + model.safetensors)")
    try:
        return read_json(path / "config.json")
    except ValueError as e:  # the loader's line names the file; the fix is the model's
        raise PretrainedError(f"{e}; re-save the model") from e


def read_tensors(path: Path, model: str | None = None) -> dict[str, Tensor]:
    """Every tensor of the directory's ``model.safetensors`` or its shards (the index file's);
    ``model``: the tfamily model kind the config maps to, for the advice on a pickled checkpoint."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = require(read_json(index), "weight_map", dict, str(index))
            files = sorted({expect(v, str, f"{index} weight_map entry {cut(k)}") for k, v in weight_map.items()})
        except ValueError as e:
            raise PretrainedError(f"{e}; re-save the model") from e
    elif (path / "model.safetensors").is_file():
        files = ["model.safetensors"]
    elif any(path.glob("pytorch_model*.bin")):
        raise PretrainedError(f"{path} holds pytorch_model.bin, a pickle, which tfamily never loads; "
                              f"{_fix_bin(model)}")
    else:
        raise PretrainedError(f"{path} has config.json but no model.safetensors; copy the weights file beside "
                              f"it (save_pretrained writes both)")
    tensors: dict[str, Tensor] = {}
    for name in files:
        f = path / name
        if Path(name).name != name or not f.is_file():
            raise PretrainedError(f"{index} names shard {name!r}, which is not a file in {path}; copy every "
                                  f"shard beside the index")
        try:
            tensors.update(load_file(str(f)))
        except SafetensorError as e:
            raise PretrainedError(f"{f} cannot be read ({e}); the file is corrupt: download or save it again") from e
    return tensors


def field(config: dict, key: str, default: Any = None, *, choices: dict | None = None) -> Any:
    """``config[key]`` (or ``default``), translated through ``choices`` when given: a value with
    no translation is refused, naming the field and the values tfamily maps."""
    value = config.get(key, default)
    if choices is None:
        return value
    if not isinstance(value, (str, int, float, bool, type(None))) or value not in choices:
        raise PretrainedError(f"config.json field {key}={cut(value)} has no tfamily mapping; supported: "
                              f"{', '.join(map(repr, choices))}")
    return choices[value]


def refuse_set(config: dict, key: str, allowed: Iterable = (None,), why: str = "") -> None:
    """Refuse a config field that tfamily does not implement unless it holds an allowed value."""
    value = config.get(key)
    if value not in tuple(allowed):
        raise PretrainedError(f"config.json field {key}={value!r} has no tfamily mapping{why}; supported: "
                              f"{', '.join(map(repr, allowed))}")


class Weights:
    """The checkpoint's tensors by name, with the model prefixes stripped; ``take`` hands each out
    once, so names no mapping took are found at the end (``left``). ``dtype``: the model's; a
    float tensor stored narrower is widened to it first, so what a family computes from the
    tensors (a folded table) is computed in the model's precision, not the file's (fp32 folded
    then cast to fp64 would stay 1e-8 off the peer's fp64 sum)."""

    def __init__(self, tensors: dict[str, Tensor], prefixes: tuple[str, ...] = (), ignore: tuple[str, ...] = (),
                 dtype: torch.dtype | None = None):
        self.tensors: dict[str, Tensor] = {}
        for name, t in tensors.items():
            short = next((name[len(p):] for p in prefixes if name.startswith(p)), name)
            if not any(part in short for part in ignore):
                if dtype is not None and t.is_floating_point():
                    t = t.to(torch.promote_types(t.dtype, dtype))  # a bf16 model's fold stays in fp32
                self.tensors[short] = t

    def has(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str, *, transpose: bool = False) -> Tensor:
        if name not in self.tensors:
            raise PretrainedError(f"model.safetensors has no weight {name!r} that config.json implies; the config "
                                  f"and weights are from different models: save both with save_pretrained")
        t = self.tensors.pop(name)
        return t.t() if transpose else t

    def left(self) -> list[str]:
        return sorted(self.tensors)


def load_into(model: nn.Module, state: dict[str, Tensor], weights: Weights, source: Path) -> None:
    """Load ``state`` (tfamily names) into ``model``, refusing a missing or extra name or a shape
    that differs from what the config builds."""
    left = weights.left()
    if left:
        raise PretrainedError(f"{source} has weights no tfamily part takes: {left[:4]}{' ...' if len(left) > 4 else ''}"
                              f"; config.json does not describe them (a head or option not supported)")
    own = model.state_dict()
    tied = _tied(model)
    missing = [k for k in own if k not in state and k not in tied]
    if missing:
        raise PretrainedError(f"{source}: no weight maps to {missing[:4]}; the config and weights disagree")
    for name, t in state.items():
        if name not in own:
            raise PretrainedError(f"{source}: mapped weight {name!r} is not in the built model (a mapping bug)")
        if tuple(t.shape) != tuple(own[name].shape):
            raise PretrainedError(f"{source}: weight for {name} has shape {tuple(t.shape)} but config.json builds "
                                  f"{tuple(own[name].shape)}; the config and weights are from different models")
    with torch.no_grad():
        for name, t in state.items():
            own[name].copy_(t)


# -- tables used in both directions (import here, export in ``export/hf.py``) -----------------
class Field(NamedTuple):
    """A config.json key and the spec field (dotted) it sets; ``default`` is what transformers
    assumes when the key is absent (None: the spec's own default); ``choices`` translates values."""
    hf: str
    ours: str
    default: Any = None
    choices: dict | None = None


class Link(NamedTuple):
    """A built model's weight and the checkpoint weights it is made of: several are stacked
    along dim 0 in order (q, k, v into one projection), each ``sizes`` rows; ``transpose`` for
    GPT-2's Conv1D (in, out) layout."""
    ours: str
    hf: tuple[str, ...]
    transpose: bool = False
    sizes: tuple[int, ...] = ()


def _put(d: dict, dotted: str, value: Any) -> None:
    *heads, last = dotted.split(".")
    for h in heads:
        d = d.setdefault(h, {})
    d[last] = value


def _get(d: dict, dotted: str) -> Any:
    for h in dotted.split("."):
        d = d.get(h) if isinstance(d, dict) else None
    return d


def spec_fields(config: dict, table: Iterable[Field]) -> dict:
    """The nested spec dict that ``table`` reads from ``config`` (keys left null are left out)."""
    out: dict = {}
    for f in table:
        value = field(config, f.hf, f.default, choices=f.choices)
        if value is not None:
            _put(out, f.ours, value)
    return out


def config_fields(resolved: dict, table: Iterable[Field]) -> dict:
    """The config.json keys ``table`` writes from a resolved spec dict (``hf.resolved``)."""
    out = {}
    for f in table:
        value = _get(resolved, f.ours)
        if f.choices is not None:  # the first config value that maps to ours (the peer's usual name)
            value = next((k for k, v in f.choices.items() if v == value), value)
        out[f.hf] = value
    return out


def take_links(w: Weights, links: Iterable[Link]) -> dict[str, Tensor]:
    out = {}
    for link in links:
        parts = [w.take(h, transpose=link.transpose) for h in link.hf]
        out[link.ours] = parts[0] if len(parts) == 1 else torch.cat(parts)
    return out


def head_links(spec_: Spec) -> list[Link]:
    """The output projection's link (``lm_head.weight``) when the head is untied; a tied head is
    the embedding, stored once."""
    return [] if spec_.tie_embeddings else [Link("head.proj.weight", ("lm_head.weight",))]


def take_causal_lm(w: Weights, links: Iterable[Link]) -> dict[str, Tensor]:
    """``take_links`` for a causal LM: a tied head that the checkpoint stores anyway
    (``lm_head.weight``, the embedding again) is taken and dropped."""
    out = take_links(w, links)
    if w.has("lm_head.weight"):
        w.take("lm_head.weight")
    return out


def give_links(state: dict[str, Tensor], links: Iterable[Link]) -> dict[str, Tensor]:
    """The checkpoint tensors of ``links`` from a built model's state dict (the inverse of ``take_links``)."""
    out = {}
    for link in links:
        t = state[link.ours]
        parts = t.split(list(link.sizes)) if len(link.hf) > 1 else (t,)
        for name, p in zip(link.hf, parts):
            out[name] = p.t() if link.transpose else p
    return out
