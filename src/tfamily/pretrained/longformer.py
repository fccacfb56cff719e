"""Longformer (Beltagy et al. 2020) masked LMs from Hugging Face's ``LongformerForMaskedLM``.

A RoBERTa (``bert.py``: its embeddings, post-norm layers and MLM head, loaded the same way) whose
self-attention is a two-sided sliding window plus global tokens with their own projections
(``heads.global_qkv``, ``nn/heads/global_qkv.py``). ``attention_window`` w (one, or one per layer)
lets query i see keys with |i - j| <= w / 2: tfamily's two-sided ``sliding_window`` of
``w / 2 + 1``. Which tokens are global is an input: the peer's ``global_attention_mask`` is the
model's ``global_tokens`` (``model(ids, key_padding=real, global_tokens=mask.bool())``). The peer
pads every input to a multiple of w with masked pad tokens; masked keys change nothing, so tfamily
runs the input at its own length, on the block-sparse kernel (global tokens included: nothing n x n).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..spec import Spec
from . import bert
from .load import PretrainedError, Weights, field

PREFIXES = ("longformer.",)
IGNORE = bert.IGNORE


def _windows(config: dict) -> list[int]:
    n = field(config, "num_hidden_layers", 12)
    w = field(config, "attention_window", 512)
    ws = [w] * n if isinstance(w, int) and not isinstance(w, bool) else w
    if not isinstance(ws, list) or len(ws) != n or any(
            isinstance(x, bool) or not isinstance(x, int) or x < 2 or x % 2 for x in ws):
        raise PretrainedError(f"config.json field attention_window={w!r} has no tfamily mapping; supported: an even "
                              f"integer >= 2, or a list of {n} of them (one per layer)")
    return ws


def spec(config: dict) -> Spec:
    windows = _windows(config)
    base = bert.spec({**config, "model_type": "roberta"})
    layers = [{"name": "sliding_window", "params": {"window": w // 2 + 1, "causal": False}} for w in windows]
    pattern = layers[0] if len(set(windows)) == 1 else {"name": "sliding_window", "params": layers[0]["params"],
                                                         "per_layer": layers}
    return base.override({"member": "longformer", "paper": "Beltagy et al. 2020 (Longformer), from a Hugging Face "
                          "checkpoint", "pattern": pattern, "heads.global_qkv": True,
                          "kernel": {"name": "blocksparse", "params": {"block_size": "auto"}}})


def weights(config: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    glob = {}
    for i in range(spec_.depth.n_layers):
        h = f"encoder.layer.{i}.attention.self."
        for kind in ("weight", "bias"):
            glob[f"stack.blocks.{i}.attn.global_proj.qkv_proj.{kind}"] = torch.cat(
                [w.take(f"{h}{p}_global.{kind}") for p in ("query", "key", "value")])
    out = bert.weights({**config, "model_type": "roberta"}, spec_, w)
    # The window attention is the wrapped one: its projections sit under ``attn.local``.
    local = {k.replace(".attn.", ".attn.local.", 1) if ".attn." in k else k: t for k, t in out.items()}
    return {**local, **glob}
