"""Llama (Touvron et al. 2023) and Mistral (Jiang et al. 2023) from Hugging Face's
``LlamaForCausalLM`` / ``MistralForCausalLM``.

Their choices on the axes: pre-norm with RMSNorm, rotary positions, grouped-query heads
(``num_key_value_heads``), a SwiGLU feed-forward (``glu`` with ``silu``), no biases, an untied
head, unscaled embeddings; Mistral adds a causal sliding window (``sliding_window``: query i
sees keys i - W < j <= i). Hugging Face's rotary rotates the two halves of each head
(``rotate_half``), which is tfamily's layout, so q and k load unpermuted; q, k and v stack
into the rows of the fused ``qkv_proj``. ``FIELDS`` and ``links`` are read in both directions
(import and ``tfamily export --format hf``).
"""
from __future__ import annotations

from torch import Tensor

from ..base.dicts import deep_merge
from ..spec import Spec
from ..base.textload import number
from .load import (Field, Link, PretrainedError, Weights, activations, config_fields, field, give_links,
                   head_links, spec_fields, take_causal_lm)

ACTIVATIONS = activations("silu", "gelu", "gelu_pytorch_tanh")
PREFIXES = ("model.",)
IGNORE = ("rotary_emb.inv_freq",)  # a buffer older checkpoints saved; recomputed from the base
TITLE, MODEL = "Llama, Mistral", "decoder"


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
    inner = "rope_theta" in rope
    return float(number(rope if inner else config, "rope_theta", "config.json" + (" rope_parameters" if inner else ""),
                        10000.0, fix="set it to the rotary base, e.g. 10000.0"))


FIELDS = (Field("vocab_size", "vocab_size", 32000), Field("hidden_size", "d_model", 4096),
          Field("num_hidden_layers", "depth.n_layers", 32), Field("num_attention_heads", "heads.n_heads", 32),
          Field("num_key_value_heads", "heads.n_kv_heads"), Field("head_dim", "heads.d_head"),
          Field("intermediate_size", "ff.d_ff", 11008), Field("hidden_act", "ff.activation", "silu", ACTIVATIONS),
          Field("rms_norm_eps", "norm.params.eps", 1e-6), Field("max_position_embeddings", "position.max_len", 2048),
          Field("tie_word_embeddings", "tie_embeddings", False), Field("attention_dropout", "attn_dropout", 0.0),
          Field("attention_bias", "bias", False))
FIXED = dict(model="decoder", dropout=0.0, embed_dropout=0.0, ff_dropout=0.0, scale_embeddings=False,
             logit_scale=False, position={"name": "rotary"}, residual={"name": "pre_norm"}, norm={"name": "rms_norm"},
             ff={"name": "glu"}, objective={"name": "causal_lm"})


def exports(spec_: Spec) -> bool:
    """A decoder with rotary positions (Mistral when it has a sliding window)."""
    return spec_.model == "decoder" and spec_.position.name == "rotary"


def spec(config: dict) -> Spec:
    attn_bias, mlp_bias = field(config, "attention_bias", False), field(config, "mlp_bias", False)
    if attn_bias != mlp_bias:
        raise PretrainedError(f"config.json fields attention_bias={attn_bias} and mlp_bias={mlp_bias} differ; "
                              f"tfamily's spec has one bias flag for both: supported only when they are equal")
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    pattern = {"name": "sliding_window", "params": {"window": window}} if window else {"name": "causal"}
    kind = config.get("model_type", "llama")
    return Spec.from_dict(deep_merge(FIXED, spec_fields(config, FIELDS), dict(
        member=kind, paper=f"{kind.capitalize()}, from a Hugging Face checkpoint", pattern=pattern,
        position={"params": {"base": _rope_base(config)}})))


def config(resolved: dict) -> dict:
    """config.json for a resolved spec dict: Mistral when the pattern is a sliding window."""
    window = resolved["pattern"]["params"].get("window") if resolved["pattern"]["name"] == "sliding_window" else None
    kind = "mistral" if window else "llama"
    return {"model_type": kind, "architectures": [f"{kind.capitalize()}ForCausalLM"], **config_fields(resolved, FIELDS),
            "mlp_bias": resolved["bias"], **({"sliding_window": window} if window else {}),
            "rope_parameters": {"rope_type": "default", "rope_theta": resolved["position"]["params"]["base"]}}


def links(spec_: Spec) -> list[Link]:
    out = [Link("embed.weight", ("embed_tokens.weight",))]
    kinds = ("weight", "bias") if spec_.bias else ("weight",)
    qkv = (spec_.heads.n_heads * spec_.d_head,) + (spec_.heads.kv_heads * spec_.d_head,) * 2
    for i in range(spec_.depth.n_layers):
        h, b = f"layers.{i}.", f"stack.blocks.{i}."
        for kind in kinds:
            out.append(Link(f"{b}attn.proj.qkv_proj.{kind}", tuple(f"{h}self_attn.{p}_proj.{kind}" for p in "qkv"),
                            sizes=qkv))
            out.append(Link(f"{b}attn.out_proj.{kind}", (f"{h}self_attn.o_proj.{kind}",)))
            out += [Link(f"{b}ff.{p}.{kind}", (f"{h}mlp.{p}_proj.{kind}",)) for p in ("gate", "up", "down")]
        out.append(Link(f"{b}attn_residual.norm.weight", (f"{h}input_layernorm.weight",)))
        out.append(Link(f"{b}ff_residual.norm.weight", (f"{h}post_attention_layernorm.weight",)))
    out.append(Link("stack.final_norm.weight", ("norm.weight",)))
    return out + head_links(spec_)


def weights(config_: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    return take_causal_lm(w, links(spec_))


def hf_weights(spec_: Spec, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Checkpoint names (without the ``model.`` prefix) from a built model's state."""
    return give_links(state, links(spec_))
