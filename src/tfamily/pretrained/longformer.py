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
from .load import Link, PretrainedError, Weights, field, give_links, take_links

PREFIXES = ("longformer.",)
IGNORE = bert.IGNORE
TITLE, MODEL = "Longformer", "encoder"


def _windows(config: dict) -> list[int]:
    n = field(config, "num_hidden_layers", 12)
    w = field(config, "attention_window", 512)
    ws = [w] * n if isinstance(w, int) and not isinstance(w, bool) else w
    if not isinstance(ws, list) or len(ws) != n or any(
            isinstance(x, bool) or not isinstance(x, int) or x < 2 or x % 2 for x in ws):
        raise PretrainedError(f"config.json field attention_window={w!r} has no tfamily mapping; supported: an even "
                              f"integer >= 2, or a list of {n} of them (one per layer)")
    return ws


def exports(spec_: Spec) -> bool:
    """An encoder with global projections (Beltagy et al. 2020, section 3.1)."""
    return spec_.model == "encoder" and spec_.heads.global_qkv


def spec(config: dict) -> Spec:
    windows = _windows(config)
    base = bert.spec({**config, "model_type": "roberta"})
    layers = [{"name": "sliding_window", "params": {"window": w // 2 + 1, "causal": False}} for w in windows]
    pattern = layers[0] if len(set(windows)) == 1 else {"name": "sliding_window", "params": layers[0]["params"],
                                                         "per_layer": layers}
    return base.override({"member": "longformer", "paper": "Beltagy et al. 2020 (Longformer), from a Hugging Face "
                          "checkpoint", "pattern": pattern, "heads.global_qkv": True,
                          "kernel": {"name": "blocksparse", "params": {"block_size": "auto"}}})


def config(resolved: dict) -> dict:
    """config.json for a resolved spec dict: BERT's fields, the window per layer, RoBERTa's positions."""
    layers = resolved["pattern"]["per_layer"] or [resolved["pattern"]] * resolved["depth"]["n_layers"]
    return {**bert.config(resolved), "model_type": "longformer", "architectures": ["LongformerForMaskedLM"],
            "attention_window": [2 * (p["params"]["window"] - 1) for p in layers], "pad_token_id": 1,
            "max_position_embeddings": resolved["position"]["max_len"] + 2}


def links(spec_: Spec) -> list[Link]:
    """The global projections Q_g, K_g, V_g of every layer (the rest is RoBERTa's, ``bert``)."""
    d = spec_.d_model
    return [Link(f"stack.blocks.{i}.attn.global_proj.qkv_proj.{kind}", tuple(
            f"encoder.layer.{i}.attention.self.{p}_global.{kind}" for p in ("query", "key", "value")), sizes=(d,) * 3)
            for i in range(spec_.depth.n_layers) for kind in ("weight", "bias")]


def weights(config: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    glob = take_links(w, links(spec_))
    out = bert.weights({**config, "model_type": "roberta"}, spec_, w)
    # The window attention is the wrapped one: its projections sit under ``attn.local``.
    local = {k.replace(".attn.", ".attn.local.", 1) if ".attn." in k else k: t for k, t in out.items()}
    return {**local, **glob}


_HEAD = {"cls.predictions.transform.dense": "lm_head.dense", "cls.predictions.transform.LayerNorm":
         "lm_head.layer_norm", "cls.predictions.bias": "lm_head.bias", "cls.predictions.decoder": "lm_head.decoder"}


def hf_weights(spec_: Spec, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Checkpoint names from a built model's state: RoBERTa's, positions from pad_token_id + 1 = 2
    (rows 0 and 1 are the pad's, zero), the head under ``lm_head.``."""
    out = bert.hf_weights(spec_, {k.replace(".attn.local.", ".attn.", 1): t for k, t in state.items()})
    table = out["embeddings.position_embeddings.weight"]
    out["embeddings.position_embeddings.weight"] = torch.cat([table.new_zeros(2, table.shape[1]), table])
    out = {next((n.replace(a, b, 1) for a, b in _HEAD.items() if n.startswith(a)), n): t for n, t in out.items()}
    return {**out, **give_links(state, links(spec_))}
