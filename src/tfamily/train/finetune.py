"""Fine-tuning settings of a run: ``train.init_from`` and ``train.lora``.

    tfamily train --init-from hf/bert-base data.corpus=reviews.csv train.lora.rank=8
    tfamily train --init-from runs/train/gpt2 model.pattern.name=sliding_window \\
        model.pattern.params.window=256 model.position.max_len=4096 data.seq_len=4096

``init_from`` (a Hugging Face directory or a tfamily run or checkpoint) replaces the member: the
spec is the checkpoint's, ``model.*`` overrides change its axes, and every weight that still
applies is copied (``transfer.py`` says which, and how a longer position table is filled; the
checkpoint is read by the reader ``registry.SOURCES`` holds for its kind, ``pretrained/transfer.py``);
the start line names what is new and what was dropped. A labelled file as the corpus turns the model into a classifier (``resolve.make_spec``). The run's vocabulary is the
checkpoint's (its tokenizer.json, or the run's vocabulary), else the corpus default.

``lora`` (``rank``, ``alpha``, ``targets``: linear layer names) trains low-rank adapters on the
targets and the head, everything else frozen (``nn/lora.py``); the checkpoint keeps base and
adapters apart, and every reader (``tfamily eval``, ``generate``, ``export``, ``--init-from``)
merges them.
"""
from __future__ import annotations

import functools
from pathlib import Path

from torch import nn

from ..nn.lora import add_lora, is_adapter
from ..registry import SOURCES
from ..settings.run import LORA
from .transfer import Source, transfer


def lora_settings(lora: dict) -> dict | None:
    if not lora:
        return None
    s = {**LORA, **lora}
    return {**s, "targets": [s["targets"]] if isinstance(s["targets"], str) else list(s["targets"])}


def source(path: str | Path) -> Source:
    """The checkpoint at ``path``, read by the reader of ``registry.SOURCES`` that claims it (once per
    process for the same path)."""
    return _read(str(Path(path).expanduser().resolve()))


@functools.lru_cache(maxsize=1)
def _read(path: str) -> Source:
    p = Path(path)
    claimed = [name for name in SOURCES.in_order() if SOURCES.entry(name).info["claims"](p)]
    if len(claimed) != 1:
        raise ValueError(f"--init-from {p}: {len(claimed)} checkpoint readers claim it ({', '.join(claimed)}); "
                         f"registered: {', '.join(SOURCES.names())}")
    return SOURCES[claimed[0]](p)


def source_spec(path: str) -> dict:
    """The spec of the checkpoint at ``path`` as a dict (what ``member_dict`` starts from)."""
    return source(path).spec.to_dict()


def vocab(cfg, ckpt=None):
    """The vocabulary a run started from a checkpoint reads its text with: the resumed checkpoint's,
    else the source's (None: the corpus default)."""
    if not cfg.train.init_from:
        return None
    if ckpt is not None and ckpt.meta.get("vocab"):
        from ..data import vocab_from_json
        return vocab_from_json(ckpt.meta["vocab"])
    return source(cfg.train.init_from).vocab


def with_lora(model: nn.Module, lora: dict) -> list[str]:
    """Freeze ``model``, add the adapters, and let them and the head train; the adapted layers' names."""
    for p in model.parameters():
        p.requires_grad_(False)
    names = add_lora(model, lora["rank"], lora["alpha"], tuple(lora["targets"]))
    for name, p in model.named_parameters():  # a head tied to the embedding is named embed.*: it stays frozen
        if is_adapter(name) or name.startswith("head."):
            p.requires_grad_(True)
    return names


def prepare(model: nn.Module, cfg, fresh: bool, notes: list[str]) -> nn.Module:
    """``model`` (just built from the run's spec) with the source's weights when the run starts
    fresh from ``train.init_from``, and the adapters of ``train.lora``; each step adds its note."""
    t = cfg.train
    if t.init_from and fresh:
        src = source(t.init_from)
        report = transfer(src.model, model, keep_head=src.spec.model == model.spec.model)
        notes.append(f"init from {src.path}: " + "; ".join(report.lines()))
    lora = lora_settings(t.lora)
    if lora:
        names = with_lora(model, lora)
        train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        notes.append(f"lora rank {lora['rank']} alpha {lora['alpha']:g} on {len(names)} linears "
                     f"({', '.join(lora['targets'])}): {train:,} of {sum(p.numel() for p in model.parameters()):,} "
                     f"weights train (the adapters and the head)")
    return model


def for_weights(model: nn.Module, meta: dict) -> nn.Module:
    """``model`` with the adapters of the run ``meta`` describes, so its checkpoint loads into it
    (then ``nn.lora.merge``); unchanged for a run without LoRA."""
    lora = lora_settings((meta.get("config") or {}).get("train", {}).get("lora") or {})
    if lora:
        add_lora(model, lora["rank"], lora["alpha"], tuple(lora["targets"]))
    return model
