"""T5 (Raffel et al. 2020) from Hugging Face's ``T5ForConditionalGeneration``.

Its choices on the axes: an encoder-decoder sharing one embedding, pre-norm with RMSNorm
(T5's LayerNorm has no mean and no bias), no input positions but a learned bias per head and
relative-distance bucket (``t5_relative``: bidirectional in the encoder, causal in the decoder,
one table per stack), scores not scaled by 1/sqrt(d_head) (``heads.scale = 1.0``), no biases,
a ReLU MLP (T5) or a gated GELU (``glu`` with tanh-GELU, T5 v1.1's ``gated-gelu``), and the
decoder output times d_model^-0.5 before a tied head (``logit_scale``, loaded at that value),
which T5 v1.1's untied head does not take. The peer's dropout after each stack's final norm is
not a tfamily site: outputs are equal in eval mode, training drops one site fewer.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..spec import Spec
from .load import PretrainedError, Weights, field, refuse_set

ACTIVATIONS = {"relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
               "silu": "silu", "swish": "silu"}
PREFIXES = ()
# The stacks' own references to the shared table, and a cross-attention table HF itself drops.
IGNORE = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "EncDecAttention.relative_attention_bias")


def _activation(config: dict) -> tuple[bool, str]:
    """(gated, tfamily activation) from ``feed_forward_proj`` ("relu", "gated-gelu", "gated-silu")."""
    proj = field(config, "feed_forward_proj", "relu")
    parts = proj.split("-") if isinstance(proj, str) else []
    if not 1 <= len(parts) <= 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise PretrainedError(f"config.json field feed_forward_proj={proj!r} has no tfamily mapping; supported: "
                              f"'ACT' or 'gated-ACT' with ACT one of {', '.join(ACTIVATIONS)}")
    act = "gelu_new" if proj == "gated-gelu" else config.get("dense_act_fn", parts[-1])
    return len(parts) == 2, field({"dense_act_fn": act}, "dense_act_fn", choices=ACTIVATIONS)


def _head(config: dict) -> tuple[bool, bool]:
    """(tied, scaled): transformers 5 always ties and says ``scale_decoder_outputs``; older configs
    say ``tie_word_embeddings`` (False for T5 v1.1, whose head is its own and unscaled)."""
    tied = config.get("tie_word_embeddings", True) is not False
    scaled = config.get("scale_decoder_outputs", tied)
    if scaled not in (True, False):
        raise PretrainedError(f"config.json field scale_decoder_outputs={scaled!r} is not true or false; re-save it")
    if scaled and not tied:
        raise PretrainedError("config.json fields tie_word_embeddings=false and scale_decoder_outputs=true have no "
                              "tfamily mapping (the d_model^-0.5 output scale reads a tied head); supported: "
                              "a tied head, scaled or not, or an untied unscaled one")
    return tied, scaled


def spec(config: dict) -> Spec:
    refuse_set(config, "is_encoder_decoder", (True, None), " (only T5ForConditionalGeneration is imported)")
    refuse_set(config, "is_decoder", (False, None), " (only T5ForConditionalGeneration is imported)")
    gated, act = _activation(config)
    tied, scaled = _head(config)
    n_layers = field(config, "num_layers", 6)
    rate = field(config, "dropout_rate", 0.1)
    return Spec.from_dict(dict(
        member="t5", model="encoder_decoder", paper="Raffel et al. 2020 (T5), from a Hugging Face checkpoint",
        vocab_size=field(config, "vocab_size", 32128), d_model=field(config, "d_model", 512),
        dropout=rate, embed_dropout=rate, attn_dropout=rate, ff_dropout=rate,
        tie_embeddings=tied, scale_embeddings=False, logit_scale=scaled, bias=False, pattern={"name": "causal"},
        position={"name": "t5_relative", "params": {
            "num_buckets": field(config, "relative_attention_num_buckets", 32),
            "max_distance": field(config, "relative_attention_max_distance", 128)}},
        heads={"n_heads": field(config, "num_heads", 8), "d_head": field(config, "d_kv", 64), "scale": 1.0},
        residual={"name": "pre_norm"},
        norm={"name": "rms_norm", "params": {"eps": field(config, "layer_norm_epsilon", 1e-6)}},
        depth={"n_layers": field(config, "num_decoder_layers") or n_layers, "n_enc_layers": n_layers},
        ff={"name": "glu" if gated else "mlp", "d_ff": field(config, "d_ff", 2048), "activation": act},
        objective={"name": "seq2seq"}))


def _attention(w: Weights, hf: str, ours: str) -> dict[str, Tensor]:
    return {f"{ours}.proj.qkv_proj.weight": torch.cat([w.take(f"{hf}.{p}.weight") for p in "qkv"]),
            f"{ours}.out_proj.weight": w.take(f"{hf}.o.weight")}


def _feedforward(w: Weights, hf: str, ours: str, gated: bool) -> dict[str, Tensor]:
    names = (("wi_0", "gate"), ("wi_1", "up"), ("wo", "down")) if gated else (("wi", "net.0"), ("wo", "net.3"))
    return {f"{ours}.{b}.weight": w.take(f"{hf}.{a}.weight") for a, b in names}


def weights(config: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    out = {"embed.weight": w.take("shared.weight")}
    gated = spec_.ff.name == "glu"
    for stack, n, cross in (("encoder", spec_.depth.n_enc_layers, False), ("decoder", spec_.depth.n_layers, True)):
        for i in range(n):
            h, b = f"{stack}.block.{i}.layer.", f"{stack}.blocks.{i}."
            out.update(_attention(w, f"{h}0.SelfAttention", f"{b}attn"))
            out[f"{b}attn_residual.norm.weight"] = w.take(f"{h}0.layer_norm.weight")
            if cross:
                out.update(_attention(w, f"{h}1.EncDecAttention", f"{b}cross"))
                out[f"{b}cross_residual.norm.weight"] = w.take(f"{h}1.layer_norm.weight")
            f = 2 if cross else 1
            out.update(_feedforward(w, f"{h}{f}.DenseReluDense", f"{b}ff", gated))
            out[f"{b}ff_residual.norm.weight"] = w.take(f"{h}{f}.layer_norm.weight")
        # Layer 0's table is the stack's: the other layers hold the same part.
        out[f"{stack}.blocks.0.attn.position.bias.weight"] = w.take(
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
        out[f"{stack}.final_norm.weight"] = w.take(f"{stack}.final_layer_norm.weight")
    if w.has("lm_head.weight"):
        head = w.take("lm_head.weight")
        if not spec_.tie_embeddings:
            out["head.proj.weight"] = head
    if spec_.logit_scale:
        out["head.logit_scale"] = torch.tensor(spec_.d_model ** -0.5)
    return out
