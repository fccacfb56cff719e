"""BERT (Devlin et al. 2019) and RoBERTa (Liu et al. 2019) masked LMs from Hugging Face's
``BertForMaskedLM`` / ``RobertaForMaskedLM``.

The ``bert`` member's choices plus what the released models do: post-norm LayerNorm, learned
positions, a LayerNorm on the embedding sum (``norm.embed``), the MLM head's dense + GELU (erf,
or for BERT's ``hidden_act`` ``gelu_new`` / ``gelu_pytorch_tanh`` tanh, as in the feed-forward) +
LayerNorm and an output with a bias, tied to the word table or not (untied, the decoder's own bias
is the one transformers reads, and both biases are written back), embeddings unscaled.

- Token types (segments): a ``type_vocab_size`` of 2 or more is kept as the model's token-type
  table (``token_types``, ``nn/embedding/token_type.py``), so a sentence pair is read as the peer
  reads it: ``model(ids, token_types=token_type_ids)`` (none given: all type 0, as the peer's
  default). Kept rather than refused: pairs are what such checkpoints were pretrained on (next
  sentence prediction) and what their fine-tuning tasks (entailment, question answering) pass.
  A single type (RoBERTa's, Longformer's ``type_vocab_size`` 1) is one row added to every token:
  it is folded into the position table, exact for every input;
- RoBERTa numbers positions from ``pad_token_id + 1``: its table's first rows are dropped, so
  position i reads row pad + 1 + i, exact for rows without pad tokens inside the sequence
  (padding at the end is masked by ``key_padding``; the pad rows' own outputs differ).
"""
from __future__ import annotations

from torch import Tensor

from ..base.dicts import deep_merge
from ..spec import Spec
from .load import (HEAD_CLASSES, Field, Link, PretrainedError, Weights, activations, config_fields, field,
                   give_links, spec_fields, take_links)

ACTIVATIONS = activations("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
# BERT's MLM head applies hidden_act as well; tfamily's head follows the feed-forward's GELU
# variant (build.py), so only these import.
HEAD_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh")
PREFIXES = ("bert.", "roberta.")
IGNORE = ("pooler.", "cls.seq_relationship.", "embeddings.position_ids", "embeddings.token_type_ids")
TITLE, MODEL = "BERT", "encoder"


def _offset(config: dict) -> int:
    """The position table's first row in use: RoBERTa's pad_token_id + 1, BERT's 0."""
    return field(config, "pad_token_id", 1) + 1 if config.get("model_type") == "roberta" else 0


def _types(config: dict) -> int:
    """The token-type table's rows (``type_vocab_size``, transformers' default 2)."""
    n = field(config, "type_vocab_size", 2)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise PretrainedError(f"config.json field type_vocab_size={n!r} has no tfamily mapping; supported: an "
                              f"integer >= 1 (1: single segments, 2: BERT's sentence pairs)")
    return n


def _pair(w: Weights, hf: str, ours: str) -> dict[str, Tensor]:
    return {f"{ours}.weight": w.take(f"{hf}.weight"), f"{ours}.bias": w.take(f"{hf}.bias")}


FIELDS = (Field("vocab_size", "vocab_size", 30522), Field("hidden_size", "d_model", 768),
          Field("num_hidden_layers", "depth.n_layers", 12), Field("num_attention_heads", "heads.n_heads", 12),
          Field("intermediate_size", "ff.d_ff", 3072), Field("hidden_act", "ff.activation", "gelu", ACTIVATIONS),
          Field("layer_norm_eps", "norm.params.eps", 1e-12), Field("tie_word_embeddings", "tie_embeddings", True),
          Field("hidden_dropout_prob", "dropout", 0.1), Field("attention_probs_dropout_prob", "attn_dropout", 0.1))
FIXED = dict(model="encoder", ff_dropout=0.0, scale_embeddings=False, logit_scale=False, bias=True,
             pattern={"name": "full"}, position={"name": "learned"}, residual={"name": "post_norm"},
             norm={"name": "layer_norm", "embed": True}, ff={"name": "mlp"}, objective={"name": "masked_lm"})


def exports(spec_: Spec) -> bool:
    """An encoder without Longformer's global projections."""
    return spec_.model == "encoder" and not spec_.heads.global_qkv


def spec(config: dict) -> Spec:
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise PretrainedError(f"config.json field position_embedding_type={config['position_embedding_type']!r} has "
                              f"no tfamily mapping; supported: 'absolute'")
    # BERT's and BigBird's heads apply hidden_act, RoBERTa's (and Longformer's) erf GELU whatever it is.
    heads = ("gelu",) if config.get("model_type") == "roberta" else HEAD_ACTIVATIONS
    if field(config, "hidden_act", "gelu") not in heads:
        raise PretrainedError(f"config.json field hidden_act={config['hidden_act']!r} has no tfamily mapping for "
                              f"{config.get('model_type', 'bert')}'s MLM head (tfamily's head follows the "
                              f"feed-forward's GELU); supported: {', '.join(map(repr, heads))}")
    vocab = field(config, "vocab_size", 30522)
    mask_id = config.get("mask_token_id")
    kind = config.get("model_type", "bert")
    return Spec.from_dict(deep_merge(FIXED, spec_fields(config, FIELDS), dict(
        member=kind, paper=f"{'RoBERTa' if kind == 'roberta' else 'BERT'}, from a Hugging Face checkpoint",
        position={"max_len": field(config, "max_position_embeddings", 512) - _offset(config)},
        token_types=0 if _types(config) == 1 else _types(config),  # one type: folded (module docstring)
        # The tokenizer's mask id (its [MASK] / <mask>); it matters only to further MLM training.
        objective={"params": {"mask_id": mask_id if isinstance(mask_id, int) else vocab - 1}})))


def config(resolved: dict) -> dict:
    """config.json for a resolved spec dict: written as BERT (positions from 0; the token-type table,
    or one zero row without it), which computes what an imported RoBERTa computes on the inputs the
    import is exact for."""
    return {"model_type": "bert", "architectures": ["BertForMaskedLM"], **config_fields(resolved, FIELDS),
            "max_position_embeddings": resolved["position"]["max_len"],
            "type_vocab_size": resolved["token_types"] or 1,
            "mask_token_id": resolved["objective"]["params"].get("mask_id")}


def links(spec_: Spec) -> list[Link]:
    d = spec_.d_model
    out = []
    for i in range(spec_.depth.n_layers):
        h, b = f"encoder.layer.{i}.", f"stack.blocks.{i}."
        for kind in ("weight", "bias"):
            out.append(Link(f"{b}attn.proj.qkv_proj.{kind}",
                            tuple(f"{h}attention.self.{p}.{kind}" for p in ("query", "key", "value")), sizes=(d,) * 3))
            for hf, ours in (("attention.output.dense", "attn.out_proj"), ("attention.output.LayerNorm",
                             "attn_residual.norm"), ("intermediate.dense", "ff.net.0"), ("output.dense", "ff.net.3"),
                             ("output.LayerNorm", "ff_residual.norm")):
                out.append(Link(f"{b}{ours}.{kind}", (f"{h}{hf}.{kind}",)))
    return out


def weights(config_: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    if not (w.has("lm_head.bias") or w.has("cls.predictions.bias")):
        raise PretrainedError(f"model.safetensors holds no masked-LM head (no lm_head.* or cls.predictions.* "
                              f"weights): it was saved from AutoModel, which drops the head; save the checkpoint "
                              f"with {HEAD_CLASSES['encoder']}.from_pretrained(DIR).save_pretrained(DIR)")
    e = "embeddings."
    types = w.take(f"{e}token_type_embeddings.weight")
    table = w.take(f"{e}position_embeddings.weight")[_offset(config_):]
    out = {"embed.weight": w.take(f"{e}word_embeddings.weight"), **_pair(w, f"{e}LayerNorm", "embed_norm"),
           **take_links(w, links(spec_))}
    if spec_.token_types:
        out["position.table.weight"], out["types.weight"] = table, types
    else:  # one type, added to every token: folded (in the model's dtype, ``Weights``)
        out["position.table.weight"] = table + types[0]
    head, names = ("lm_head.", ("dense", "layer_norm")) if w.has("lm_head.bias") else (
        "cls.predictions.", ("transform.dense", "transform.LayerNorm"))
    out.update(_pair(w, f"{head}{names[0]}", "head.transform.0"))
    out.update(_pair(w, f"{head}{names[1]}", "head.transform.2"))
    out["head.bias"] = w.take(f"{head}bias")
    decoder = f"{head}decoder."
    if spec_.tie_embeddings:  # the decoder is the word table and its bias the head's: stored twice at most
        for name in (f"{decoder}weight", f"{decoder}bias"):
            if w.has(name):
                w.take(name)
        return out
    out["head.out.proj.weight"] = w.take(f"{decoder}weight")
    # Untied, transformers 5 keeps decoder.bias a parameter of its own and the head's forward reads
    # only the decoder, so decoder.bias is the bias in use (``bias`` is then unread). Files that
    # transformers 4 wrote hold one bias only (it tied the two whatever the config said): ``bias``.
    if w.has(f"{decoder}bias"):
        out["head.bias"] = w.take(f"{decoder}bias")
    return out


def hf_weights(spec_: Spec, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Checkpoint names (without the ``bert.`` prefix, the head's under ``cls.``) from a built
    model's state; without a token-type table, one zero row (a folded row is in the positions)."""
    e, p = "embeddings.", "cls.predictions."
    out = {f"{e}word_embeddings.weight": state["embed.weight"], f"{e}position_embeddings.weight":
           state["position.table.weight"], f"{e}token_type_embeddings.weight": state["types.weight"] if
           spec_.token_types else state["embed.weight"].new_zeros(1, spec_.d_model), f"{e}LayerNorm.weight":
           state["embed_norm.weight"],
           f"{e}LayerNorm.bias": state["embed_norm.bias"], **give_links(state, links(spec_))}
    for hf, ours in (("transform.dense", "head.transform.0"), ("transform.LayerNorm", "head.transform.2")):
        out[f"{p}{hf}.weight"], out[f"{p}{hf}.bias"] = state[f"{ours}.weight"], state[f"{ours}.bias"]
    out[f"{p}bias"] = state["head.bias"]
    if not spec_.tie_embeddings:  # both biases written: transformers 5 reads the decoder's, 4 the head's
        out[f"{p}decoder.weight"], out[f"{p}decoder.bias"] = state["head.out.proj.weight"], state["head.bias"]
    return out
