"""BERT (Devlin et al. 2019) and RoBERTa (Liu et al. 2019) masked LMs from Hugging Face's
``BertForMaskedLM`` / ``RobertaForMaskedLM``.

The ``bert`` member's choices plus what the released models do: post-norm LayerNorm, learned
positions, a LayerNorm on the embedding sum (``norm.embed``), the MLM head's dense + GELU +
LayerNorm and a tied output with a bias, embeddings unscaled. Two inputs tfamily's encoder does
not take are folded in at load time, exact for the inputs they cover:
- the token-type (segment) embedding of type 0 is added to every row of the position table:
  exact for single-segment inputs (token_type_ids all 0), as in masked-LM use;
- RoBERTa numbers positions from ``pad_token_id + 1``: its table's first rows are dropped, so
  position i reads row pad + 1 + i, exact for rows without pad tokens inside the sequence
  (padding at the end is masked by ``key_padding``; the pad rows' own outputs differ).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..spec import Spec
from .load import PretrainedError, Weights, field

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
PREFIXES = ("bert.", "roberta.")
IGNORE = ("pooler.", "cls.seq_relationship.", "embeddings.position_ids", "embeddings.token_type_ids")


def _offset(config: dict) -> int:
    """The position table's first row in use: RoBERTa's pad_token_id + 1, BERT's 0."""
    return field(config, "pad_token_id", 1) + 1 if config.get("model_type") == "roberta" else 0


def spec(config: dict) -> Spec:
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise PretrainedError(f"config.json field position_embedding_type={config['position_embedding_type']!r} has "
                              f"no tfamily mapping; supported: 'absolute'")
    if field(config, "hidden_act", "gelu") != "gelu":
        raise PretrainedError(f"config.json field hidden_act={config['hidden_act']!r} has no tfamily mapping for the "
                              f"MLM head (its transform is erf GELU); supported: 'gelu'")
    vocab, d = field(config, "vocab_size", 30522), field(config, "hidden_size", 768)
    mask_id = config.get("mask_token_id")
    kind = config.get("model_type", "bert")
    return Spec.from_dict(dict(
        member=kind, model="encoder", paper=f"{'RoBERTa' if kind == 'roberta' else 'BERT'}, from a Hugging Face "
                                            f"checkpoint", vocab_size=vocab, d_model=d,
        dropout=field(config, "hidden_dropout_prob", 0.1),
        attn_dropout=field(config, "attention_probs_dropout_prob", 0.1),
        ff_dropout=0.0, tie_embeddings=field(config, "tie_word_embeddings", True), scale_embeddings=False,
        logit_scale=False, bias=True, pattern={"name": "full"},
        position={"name": "learned", "max_len": field(config, "max_position_embeddings", 512) - _offset(config)},
        heads={"n_heads": field(config, "num_attention_heads", 12)}, residual={"name": "post_norm"},
        norm={"name": "layer_norm", "params": {"eps": field(config, "layer_norm_eps", 1e-12)}, "embed": True},
        depth={"n_layers": field(config, "num_hidden_layers", 12)},
        ff={"name": "mlp", "d_ff": field(config, "intermediate_size", 3072),
            "activation": field(config, "hidden_act", "gelu", choices=ACTIVATIONS)},
        # The tokenizer's mask id (its [MASK] / <mask>); it matters only to further MLM training.
        objective={"name": "masked_lm", "params": {"mask_id": mask_id if isinstance(mask_id, int) else vocab - 1}}))


def _pair(w: Weights, hf: str, ours: str) -> dict[str, Tensor]:
    return {f"{ours}.weight": w.take(f"{hf}.weight"), f"{ours}.bias": w.take(f"{hf}.bias")}


def weights(config: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    e = "embeddings."
    types = w.take(f"{e}token_type_embeddings.weight")
    table = w.take(f"{e}position_embeddings.weight")[_offset(config):]
    out = {"embed.weight": w.take(f"{e}word_embeddings.weight"), "position.table.weight": table + types[0],
           **_pair(w, f"{e}LayerNorm", "embed_norm")}
    for i in range(spec_.depth.n_layers):
        h, b = f"encoder.layer.{i}.", f"stack.blocks.{i}."
        for kind in ("weight", "bias"):
            out[f"{b}attn.proj.qkv_proj.{kind}"] = torch.cat(
                [w.take(f"{h}attention.self.{p}.{kind}") for p in ("query", "key", "value")])
        out.update(_pair(w, f"{h}attention.output.dense", f"{b}attn.out_proj"))
        out.update(_pair(w, f"{h}attention.output.LayerNorm", f"{b}attn_residual.norm"))
        out.update(_pair(w, f"{h}intermediate.dense", f"{b}ff.net.0"))
        out.update(_pair(w, f"{h}output.dense", f"{b}ff.net.3"))
        out.update(_pair(w, f"{h}output.LayerNorm", f"{b}ff_residual.norm"))
    head, names = ("lm_head.", ("dense", "layer_norm")) if w.has("lm_head.bias") else (
        "cls.predictions.", ("transform.dense", "transform.LayerNorm"))
    out.update(_pair(w, f"{head}{names[0]}", "head.transform.0"))
    out.update(_pair(w, f"{head}{names[1]}", "head.transform.2"))
    out["head.bias"] = w.take(f"{head}bias")
    for tied in (f"{head}decoder.weight", f"{head}decoder.bias"):
        if w.has(tied):  # the decoder is the word embedding, its bias the head's: tied, stored twice at most
            t = w.take(tied)
            if tied.endswith("weight") and not spec_.tie_embeddings:
                out["head.out.proj.weight"] = t
    return out
