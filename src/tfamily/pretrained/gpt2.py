"""GPT-2 (Radford et al. 2019) from Hugging Face's ``GPT2LMHeadModel`` / ``GPT2Model``.

The ``gpt`` member's choices: pre-norm LayerNorm, learned positions, causal attention, a
tanh-GELU MLP, a tied head without a scale and embeddings added unscaled. GPT-2 stores its
linear layers as ``Conv1D`` (weight (in, out)); they are transposed here, at load time, into
``nn.Linear``'s (out, in): no new layer. ``c_attn``'s columns are [q; k; v], the rows of the
fused ``qkv_proj``.
"""
from __future__ import annotations

from torch import Tensor

from ..spec import Spec
from .load import Weights, field, refuse_set

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
PREFIXES = ("transformer.",)
IGNORE = (".attn.bias", ".attn.masked_bias")  # the causal-mask buffers of older checkpoints


def spec(config: dict) -> Spec:
    refuse_set(config, "scale_attn_weights", (True, None), " (attention scores are always scaled by 1/sqrt(d_head))")
    refuse_set(config, "scale_attn_by_inverse_layer_idx", (False, None))
    refuse_set(config, "add_cross_attention", (False, None))
    d, n_layer = field(config, "n_embd", 768), field(config, "n_layer", 12)
    return Spec.from_dict(dict(
        member="gpt2", paper="Radford et al. 2019 (GPT-2), from a Hugging Face checkpoint", model="decoder",
        vocab_size=field(config, "vocab_size", 50257), d_model=d,
        dropout=field(config, "resid_pdrop", 0.1), embed_dropout=field(config, "embd_pdrop", 0.1),
        attn_dropout=field(config, "attn_pdrop", 0.1), ff_dropout=0.0,
        tie_embeddings=field(config, "tie_word_embeddings", True), scale_embeddings=False, logit_scale=False,
        bias=True, pattern={"name": "causal"},
        position={"name": "learned", "max_len": field(config, "n_positions", 1024)},
        heads={"n_heads": field(config, "n_head", 12)}, residual={"name": "pre_norm"},
        norm={"name": "layer_norm", "params": {"eps": field(config, "layer_norm_epsilon", 1e-5)}},
        depth={"n_layers": n_layer},
        ff={"name": "mlp", "d_ff": field(config, "n_inner") or 4 * d,
            "activation": field(config, "activation_function", "gelu_new", choices=ACTIVATIONS)},
        objective={"name": "causal_lm"}))


def weights(config: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    out = {"embed.weight": w.take("wte.weight"), "position.table.weight": w.take("wpe.weight")}
    for i in range(spec_.depth.n_layers):
        h, b = f"h.{i}.", f"stack.blocks.{i}."
        for hf, ours in (("ln_1", "attn_residual.norm"), ("ln_2", "ff_residual.norm"),
                         ("attn.c_attn", "attn.proj.qkv_proj"), ("attn.c_proj", "attn.out_proj"),
                         ("mlp.c_fc", "ff.net.0"), ("mlp.c_proj", "ff.net.3")):
            conv1d = not hf.startswith("ln")  # Conv1D weights are (in, out)
            out[f"{b}{ours}.weight"] = w.take(f"{h}{hf}.weight", transpose=conv1d)
            out[f"{b}{ours}.bias"] = w.take(f"{h}{hf}.bias")
    out["stack.final_norm.weight"], out["stack.final_norm.bias"] = w.take("ln_f.weight"), w.take("ln_f.bias")
    if w.has("lm_head.weight"):
        head = w.take("lm_head.weight")
        if not spec_.tie_embeddings:
            out["head.proj.weight"] = head
    return out
