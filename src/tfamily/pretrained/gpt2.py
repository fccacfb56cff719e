"""GPT-2 (Radford et al. 2019) from and to Hugging Face's ``GPT2LMHeadModel`` / ``GPT2Model``.

The ``gpt`` member's choices: pre-norm LayerNorm, learned positions, causal attention, a
tanh-GELU MLP, a tied head without a scale and embeddings added unscaled. GPT-2 stores its
linear layers as ``Conv1D`` (weight (in, out)); they are transposed here, at load time, into
``nn.Linear``'s (out, in): no new layer. ``c_attn``'s columns are [q; k; v], the rows of the
fused ``qkv_proj``. ``FIELDS`` and ``links`` are read in both directions (import and
``tfamily export --format hf``).
"""
from __future__ import annotations

from torch import Tensor

from ..base.dicts import deep_merge
from ..spec import Spec
from .load import (Field, Link, Weights, activations, config_fields, give_links, head_links, refuse_set,
                   spec_fields, take_causal_lm)

ACTIVATIONS = activations("gelu_new", "gelu_pytorch_tanh", "gelu", "relu")
PREFIXES = ("transformer.",)
IGNORE = (".attn.bias", ".attn.masked_bias")  # the causal-mask buffers of older checkpoints
ARCHITECTURE = "GPT2LMHeadModel"
TITLE, MODEL = "GPT-2", "decoder"

FIELDS = (Field("vocab_size", "vocab_size", 50257), Field("n_embd", "d_model", 768),
          Field("n_layer", "depth.n_layers", 12), Field("n_head", "heads.n_heads", 12),
          Field("n_positions", "position.max_len", 1024), Field("n_inner", "ff.d_ff"),
          Field("activation_function", "ff.activation", "gelu_new", ACTIVATIONS),
          Field("layer_norm_epsilon", "norm.params.eps", 1e-5), Field("tie_word_embeddings", "tie_embeddings", True),
          Field("resid_pdrop", "dropout", 0.1), Field("embd_pdrop", "embed_dropout", 0.1),
          Field("attn_pdrop", "attn_dropout", 0.1))
# What every GPT-2 is, whatever its config says.
FIXED = dict(member="gpt2", paper="Radford et al. 2019 (GPT-2), from a Hugging Face checkpoint", model="decoder",
             ff_dropout=0.0, scale_embeddings=False, logit_scale=False, bias=True, pattern={"name": "causal"},
             position={"name": "learned"}, residual={"name": "pre_norm"}, norm={"name": "layer_norm"},
             ff={"name": "mlp"}, objective={"name": "causal_lm"})


def exports(spec_: Spec) -> bool:
    """Every decoder without rotary positions (Llama's); a choice GPT-2 lacks is refused by name."""
    return spec_.model == "decoder" and spec_.position.name != "rotary"


def spec(config: dict) -> Spec:
    refuse_set(config, "scale_attn_weights", (True, None), " (attention scores are always scaled by 1/sqrt(d_head))")
    refuse_set(config, "scale_attn_by_inverse_layer_idx", (False, None))
    refuse_set(config, "add_cross_attention", (False, None))
    return Spec.from_dict(deep_merge(FIXED, spec_fields(config, FIELDS)))


def config(resolved: dict) -> dict:
    """config.json for a resolved spec dict that ``spec`` maps back (checked by the exporter)."""
    ends = {} if resolved["vocab_size"] > 50256 else {"bos_token_id": None, "eos_token_id": None}  # GPT-2's 50256
    return {"model_type": "gpt2", "architectures": [ARCHITECTURE], **config_fields(resolved, FIELDS), **ends}


def links(spec_: Spec) -> list[Link]:
    out = [Link("embed.weight", ("wte.weight",)), Link("position.table.weight", ("wpe.weight",))]
    for i in range(spec_.depth.n_layers):
        h, b = f"h.{i}.", f"stack.blocks.{i}."
        for hf, ours in (("ln_1", "attn_residual.norm"), ("ln_2", "ff_residual.norm"),
                         ("attn.c_attn", "attn.proj.qkv_proj"), ("attn.c_proj", "attn.out_proj"),
                         ("mlp.c_fc", "ff.net.0"), ("mlp.c_proj", "ff.net.3")):
            conv1d = not hf.startswith("ln")  # Conv1D weights are (in, out)
            out += [Link(f"{b}{ours}.weight", (f"{h}{hf}.weight",), conv1d),
                    Link(f"{b}{ours}.bias", (f"{h}{hf}.bias",))]
    out += [Link("stack.final_norm.weight", ("ln_f.weight",)), Link("stack.final_norm.bias", ("ln_f.bias",))]
    return out + head_links(spec_)


def weights(config_: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    return take_causal_lm(w, links(spec_))


def hf_weights(spec_: Spec, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Checkpoint names (without the ``transformer.`` prefix) from a built model's state."""
    return give_links(state, links(spec_))
