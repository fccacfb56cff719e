"""Llama (Touvron et al. 2023) and Mistral (Jiang et al. 2023) from Hugging Face's
``LlamaForCausalLM`` / ``MistralForCausalLM``.

Their choices on the axes: pre-norm with RMSNorm, rotary positions, grouped-query heads
(``num_key_value_heads``), a SwiGLU feed-forward (``glu`` with ``silu``), no biases, an untied
head, unscaled embeddings; Mistral adds a causal sliding window (``sliding_window``: query i
sees keys i - W < j <= i). Hugging Face's rotary rotates the two halves of each head
(``rotate_half``), which is tfamily's layout, so q and k load unpermuted; q, k and v stack
into the rows of the fused ``qkv_proj``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..spec import Spec
from .load import PretrainedError, Weights, field

ACTIVATIONS = {"silu": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}
PREFIXES = ("model.",)
IGNORE = ("rotary_emb.inv_freq",)  # a buffer older checkpoints saved; recomputed from the base


def _rope_base(config: dict) -> float:
    """The rotary base: ``rope_parameters`` (transformers 5) or ``rope_theta`` + ``rope_scaling``."""
    rope = config.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise PretrainedError(f"config.json field rope_parameters={rope!r} is not a dict; re-save the model")
    kind = rope.get("rope_type", rope.get("type", "default"))
    scaling = config.get("rope_scaling")
    if kind != "default" or scaling not in (None, {}):
        raise PretrainedError(f"config.json field rope_parameters/rope_scaling={scaling or rope!r} has no tfamily "
                              f"mapping (only unscaled rotary); supported: rope_type 'default'")
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def spec(config: dict) -> Spec:
    d, n_heads = field(config, "hidden_size", 4096), field(config, "num_attention_heads", 32)
    attn_bias, mlp_bias = field(config, "attention_bias", False), field(config, "mlp_bias", False)
    if attn_bias != mlp_bias:
        raise PretrainedError(f"config.json fields attention_bias={attn_bias} and mlp_bias={mlp_bias} differ; "
                              f"tfamily's spec has one bias flag for both: supported only when they are equal")
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    pattern = {"name": "sliding_window", "params": {"window": window}} if window else {"name": "causal"}
    return Spec.from_dict(dict(
        member=config.get("model_type", "llama"), model="decoder",
        paper=f"{config.get('model_type', 'llama').capitalize()}, from a Hugging Face checkpoint",
        vocab_size=field(config, "vocab_size", 32000), d_model=d, dropout=0.0, embed_dropout=0.0,
        attn_dropout=field(config, "attention_dropout", 0.0), ff_dropout=0.0,
        tie_embeddings=field(config, "tie_word_embeddings", False), scale_embeddings=False, logit_scale=False,
        bias=attn_bias, pattern=pattern,
        position={"name": "rotary", "max_len": field(config, "max_position_embeddings", 2048),
                  "params": {"base": _rope_base(config)}},
        heads={"n_heads": n_heads, "n_kv_heads": field(config, "num_key_value_heads") or n_heads,
               "d_head": field(config, "head_dim") or d // n_heads},
        residual={"name": "pre_norm"},
        norm={"name": "rms_norm", "params": {"eps": field(config, "rms_norm_eps", 1e-6)}},
        depth={"n_layers": field(config, "num_hidden_layers", 32)},
        ff={"name": "glu", "d_ff": field(config, "intermediate_size", 11008),
            "activation": field(config, "hidden_act", "silu", choices=ACTIVATIONS)},
        objective={"name": "causal_lm"}))


def weights(config: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    out = {"embed.weight": w.take("embed_tokens.weight")}
    kinds = ("weight", "bias") if spec_.bias else ("weight",)
    for i in range(spec_.depth.n_layers):
        h, b = f"layers.{i}.", f"stack.blocks.{i}."
        for kind in kinds:
            out[f"{b}attn.proj.qkv_proj.{kind}"] = torch.cat(
                [w.take(f"{h}self_attn.{p}_proj.{kind}") for p in "qkv"])
            out[f"{b}attn.out_proj.{kind}"] = w.take(f"{h}self_attn.o_proj.{kind}")
            for p in ("gate", "up", "down"):
                out[f"{b}ff.{p}.{kind}"] = w.take(f"{h}mlp.{p}_proj.{kind}")
        out[f"{b}attn_residual.norm.weight"] = w.take(f"{h}input_layernorm.weight")
        out[f"{b}ff_residual.norm.weight"] = w.take(f"{h}post_attention_layernorm.weight")
    out["stack.final_norm.weight"] = w.take("norm.weight")
    if w.has("lm_head.weight"):
        head = w.take("lm_head.weight")
        if not spec_.tie_embeddings:
            out["head.proj.weight"] = head
    return out
