"""T5 (Raffel et al. 2020) from Hugging Face's ``T5ForConditionalGeneration``.

Its choices on the axes: an encoder-decoder sharing one embedding, pre-norm with RMSNorm
(T5's LayerNorm has no mean and no bias), no input positions but a learned bias per head and
relative-distance bucket (``t5_relative``: bidirectional in the encoder, causal in the decoder,
one table per stack), scores not scaled by 1/sqrt(d_head) (``heads.scale = 1.0``), no biases,
a ReLU MLP (T5) or a gated GELU (``glu`` with tanh-GELU, T5 v1.1's ``gated-gelu``), and the
decoder output times d_model^-0.5 before a tied head (``logit_scale``, loaded at that value),
which T5 v1.1's untied head does not take. The peer's dropout after each stack's final norm is
not a tfamily site: outputs are equal in eval mode, training drops one site fewer. ``links`` and
``config`` also serve ``tfamily export --format hf`` (a tied head, scaled or not, as
transformers 5 writes T5 and T5 v1.1).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..spec import Spec
from .load import Link, PretrainedError, Weights, activations, field, give_links, refuse_set, take_links

ACTIVATIONS = activations("relu", "gelu_new", "gelu_pytorch_tanh", "gelu", "silu", "swish")
PREFIXES = ()
# The stacks' own references to the shared table, and a cross-attention table HF itself drops.
IGNORE = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "EncDecAttention.relative_attention_bias")
TITLE, MODEL = "T5", "encoder_decoder"


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


def exports(spec_: Spec) -> bool:
    """Every encoder-decoder; a choice T5 lacks is refused by name."""
    return spec_.model == "encoder_decoder"


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


def config(resolved: dict) -> dict:
    """config.json for a resolved spec dict that ``spec`` maps back (checked by the exporter)."""
    ff, heads = resolved["ff"], resolved["heads"]
    act = next(k for k, v in ACTIVATIONS.items() if v == ff["activation"])
    proj = ("gated-" if ff["name"] == "glu" else "") + act
    return {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": True,
            "vocab_size": resolved["vocab_size"], "d_model": resolved["d_model"], "d_kv": heads["d_head"],
            "num_heads": heads["n_heads"], "d_ff": ff["d_ff"], "num_layers": resolved["depth"]["n_enc_layers"],
            "num_decoder_layers": resolved["depth"]["n_layers"], "feed_forward_proj": proj,
            **({"dense_act_fn": act} if proj != "gated-gelu" else {}),
            "relative_attention_num_buckets": resolved["position"]["params"]["num_buckets"],
            "relative_attention_max_distance": resolved["position"]["params"]["max_distance"],
            "dropout_rate": resolved["dropout"], "layer_norm_epsilon": resolved["norm"]["params"]["eps"],
            "tie_word_embeddings": True, "scale_decoder_outputs": resolved["logit_scale"],
            "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}


def links(spec_: Spec) -> list[Link]:
    """Checkpoint names (T5's own) of every weight but the output scale and an untied head."""
    inner = spec_.heads.n_heads * spec_.d_head
    ff = (("wi_0", "gate"), ("wi_1", "up"), ("wo", "down")) if spec_.ff.name == "glu" else (("wi", "net.0"),
                                                                                            ("wo", "net.3"))
    out = [Link("embed.weight", ("shared.weight",))]
    for stack, n, cross in (("encoder", spec_.depth.n_enc_layers, False), ("decoder", spec_.depth.n_layers, True)):
        for i in range(n):
            h, b = f"{stack}.block.{i}.layer.", f"{stack}.blocks.{i}."
            sites = (("0.SelfAttention", "attn", "0", "attn_residual"),) + (
                (("1.EncDecAttention", "cross", "1", "cross_residual"),) if cross else ())
            for hf, ours, norm, res in sites:
                out += [Link(f"{b}{ours}.proj.qkv_proj.weight", tuple(f"{h}{hf}.{p}.weight" for p in "qkv"),
                             sizes=(inner,) * 3), Link(f"{b}{ours}.out_proj.weight", (f"{h}{hf}.o.weight",)),
                        Link(f"{b}{res}.norm.weight", (f"{h}{norm}.layer_norm.weight",))]
            f = 2 if cross else 1
            out += [Link(f"{b}ff.{ours}.weight", (f"{h}{f}.DenseReluDense.{hf}.weight",)) for hf, ours in ff]
            out.append(Link(f"{b}ff_residual.norm.weight", (f"{h}{f}.layer_norm.weight",)))
        # Layer 0's table is the stack's: the other layers hold the same part.
        out.append(Link(f"{stack}.blocks.0.attn.position.bias.weight",
                        (f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",)))
        out.append(Link(f"{stack}.final_norm.weight", (f"{stack}.final_layer_norm.weight",)))
    return out


def weights(config: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    out = take_links(w, links(spec_))
    if w.has("lm_head.weight"):
        head = w.take("lm_head.weight")
        if not spec_.tie_embeddings:
            out["head.proj.weight"] = head
    if spec_.logit_scale:
        # Built in fp64 (Python's float), so any model dtype gets d^-0.5 rounded once, as the peer's does.
        out["head.logit_scale"] = torch.tensor(spec_.d_model ** -0.5, dtype=torch.float64)
    return out


def hf_weights(spec_: Spec, state: dict[str, Tensor]) -> dict[str, Tensor]:
    return give_links(state, links(spec_))
