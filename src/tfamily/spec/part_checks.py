"""Spec checks that need the parts themselves, run on every ``Spec`` through ``registry.CHECKS``.

``spec/__init__.py`` checks names and numbers only and never imports ``nn/``; what only a part can
tell (which keyword parameters it takes, whether their values are valid, which pairs of
choices it cannot serve) is checked here, beside ``build.py``, by building the light parts
(patterns and kernels hold no weights) or reading their constructors' signatures.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..nn.patterns import resolve
from ..nn.residual import check_gate_bias
from ..registry import (ALIGNMENTS, CHECKS, DEPTHS, FEEDFORWARDS, KERNELS, OBJECTIVES, PATTERNS, POSITIONS,
                       RESIDUALS, STATES)

if TYPE_CHECKING:
    from . import Spec


def check_params(spec: Spec) -> None:
    """Unknown ``params`` keys are refused on every axis, naming the valid keys."""
    for reg, part in ((POSITIONS, spec.position), (STATES, spec.state), (FEEDFORWARDS, spec.ff),
                      (DEPTHS, spec.depth), (OBJECTIVES, spec.objective), (RESIDUALS, spec.residual)):
        reg.check_params(part.name, part.params)
    if "gate_bias" in spec.residual.params:  # a gate's b_g (nn/residual/gates.py): checked before any weights exist
        check_gate_bias(spec.residual.params["gate_bias"])
    # Kernels and patterns validate their values too: build them (no weights, no compute).
    KERNELS.make(spec.kernel.name, spec.kernel.params)
    for p in spec.pattern.per_layer or (spec.pattern,):
        if PATTERNS.entry(p.name).needs:  # a learned pattern: its weights wait for build
            PATTERNS.check_params(p.name, p.params, where="pattern.params")
        else:
            resolve(p)


def check_lsh(spec: Spec) -> None:
    if spec.kernel.name != "lsh":
        return
    if not spec.heads.shared_qk:
        raise ValueError("kernel 'lsh' needs heads.shared_qk=True: LSH buckets queries with the "
                         "keys they hash with, so keys must be the normalised queries (Kitaev et al. "
                         "2020, section 2); set heads.shared_qk=True or use another kernel")
    if spec.model == "encoder_decoder":
        raise ValueError("kernel 'lsh' with model 'encoder_decoder': the kernel would also serve "
                         "cross-attention, where queries and keys are different sequences and "
                         "shared-QK hashing does not apply; use model 'decoder' or 'encoder'")
    # Head-dependent patterns are served: every LSH path passes each row's batch and head
    # index to mask_mod (tests/nn/kernels/test_lsh.py, PerHead against the dense reference).


def check_universal(spec: Spec) -> None:
    """Depths that share one block across steps (Universal Transformer, Dehghani et al. 2019)."""
    depth = spec.depth
    if not DEPTHS.entry(depth.name).info.get("shared"):
        return
    if spec.state.name == "xl_memory":
        raise ValueError(f"depth {depth.name!r} with state 'xl_memory': XL memory keeps each layer's input, "
                         f"but the Universal Transformer's steps share one block; use state 'kv_cache'")
    if depth.checkpointing:
        raise ValueError(f"depth {depth.name!r} with depth.checkpointing=True is not supported; "
                         f"set checkpointing=False")
    if depth.name == "universal_act":
        from ..nn.depth import check_act
        check_act(depth.n_layers, depth.params.get("eps", 0.01), depth.params.get("ponder_weight", 0.01))


def check_feedforward(spec: Spec) -> None:
    """A feed-forward that mixes positions (``mixes_positions``: the separable convolution,
    Dehghani et al. 2019, section 2.1) needs each call to see whole sequences, or to carry
    its window's inputs from the previous call (a KV-cache decode does, ``LayerState.parts``)."""
    ff = spec.ff
    if not FEEDFORWARDS.entry(ff.name).info.get("mixes_positions"):
        return
    if ff.chunks > 1:
        raise ValueError(f"ff {ff.name!r} with ff.chunks={ff.chunks}: chunking cuts the sequence into pieces "
                         f"and the convolution's window would not see across their edges; set ff.chunks=1")
    if spec.state.name == "xl_memory":
        raise ValueError(f"ff {ff.name!r} with state 'xl_memory': the convolution carries no inputs across XL "
                         f"segments, so each segment's first positions would see zeros; use ff 'mlp' "
                         f"(or state 'kv_cache')")


def check_recurrent(spec: Spec) -> None:
    """Recurrent depths (RNN/LSTM/GRU as the whole stack) and the choices they pair with."""
    recurrent = DEPTHS.entry(spec.depth.name).info.get("recurrent", False)
    if recurrent != (spec.state.name == "rnn_hidden"):
        raise ValueError(f"depth {spec.depth.name!r} with state {spec.state.name!r}: a recurrent depth carries its "
                         f"hidden state (state 'rnn_hidden') and only a recurrent depth has one; set both or neither")
    if not recurrent:
        return
    if spec.model == "encoder":
        raise ValueError(f"depth {spec.depth.name!r} with model 'encoder': a recurrent stack reads left to right, "
                         f"so a masked-LM encoder would not see the right context; use model 'decoder' or "
                         f"'encoder_decoder'")
    if POSITIONS.entry(spec.position.name).info.get("stage") != "input":
        raise ValueError(f"position {spec.position.name!r} with depth {spec.depth.name!r}: it enters attention "
                         f"scores, and a recurrent stack has none; use position 'none' (or an input position)")
    if spec.depth.checkpointing:
        raise ValueError(f"depth {spec.depth.name!r} with depth.checkpointing=True: a recurrent stack is one torch "
                         f"module, not layers to recompute; set checkpointing=False")
    p = spec.depth.params
    if spec.model == "encoder_decoder" and spec.position.name != "none":
        raise ValueError(f"position {spec.position.name!r} with a recurrent encoder-decoder: its recurrences give "
                         f"the order and it adds no positions; set position 'none'")
    if spec.model == "decoder":
        if p:
            raise ValueError(f"depth.params {sorted(p)} describe a recurrent encoder-decoder (how the decoder reads "
                             f"the encoder); a language model (model 'decoder') takes none: drop them")
        return
    alignment, attend = p.get("alignment", "general"), p.get("attend", "luong")
    if alignment != "none":
        ALIGNMENTS.check(alignment)
    if attend not in ("luong", "bahdanau"):
        raise ValueError(f"depth.params.attend={attend!r}: 'luong' (the current state scores, Luong et al. 2015) "
                         f"or 'bahdanau' (the previous state, Bahdanau et al. 2015)")
    for key in ("bidirectional", "input_feeding"):
        if not isinstance(p.get(key, False), bool):
            raise TypeError(f"depth.params.{key} must be true or false, got {p[key]!r}")
    if attend == "bahdanau" and alignment == "none":
        raise ValueError("depth.params.attend='bahdanau' needs an alignment score (its context enters every "
                         "state); pick alignment 'additive' (the paper's), or attend 'luong' for none")
    if attend == "luong" and (p.get("bidirectional") or spec.depth.n_enc_layers not in (None, spec.depth.n_layers)):
        raise ValueError(f"depth.params.attend='luong' starts the decoder from the encoder's final state, so the "
                         f"encoder must be unidirectional with the decoder's n_layers ({spec.depth.n_layers}); got "
                         f"bidirectional={p.get('bidirectional', False)}, n_enc_layers={spec.depth.n_enc_layers}; "
                         f"use attend 'bahdanau' for a bidirectional encoder")
    if alignment == "dot" and p.get("bidirectional"):
        raise ValueError("alignment 'dot' with a bidirectional encoder: h_t^T h_s needs states of one size and a "
                         "bidirectional encoder's are twice the decoder's; use 'general', 'concat' or 'additive'")


def check_unused_by_recurrent(spec: Spec) -> None:
    """A recurrent stack has no attention pattern, kernel, residual or feed-forward, so a setting of
    any of them would be silently ignored: refuse it by name. The head count is a size, like
    d_model, that shared configs (``-c tiny``) set for every member; it is left out."""
    if not DEPTHS.entry(spec.depth.name).info.get("recurrent", False):
        return
    from . import FeedForwardSpec, KernelSpec, PatternSpec, ResidualSpec
    for key, part, default in (("pattern", spec.pattern, PatternSpec()), ("kernel", spec.kernel, KernelSpec()),
                               ("residual", spec.residual, ResidualSpec()), ("ff", spec.ff, FeedForwardSpec())):
        if part != default:
            name = getattr(part, "name", None)
            shown = f" {name!r}" if name != getattr(default, "name", None) else ""
            raise ValueError(f"model.{key}{shown} would do nothing with depth {spec.depth.name!r}: a recurrent stack has "
                             f"no attention pattern, kernel, residual or feed-forward; drop the model.{key} "
                             f"override (or pick a Transformer member, e.g. gpt)")


# checks run in name order: this one before 'lsh' and 'params', which build parts it names as unused
CHECKS.register("ignored_by_recurrent", check_unused_by_recurrent)
CHECKS.register("params", check_params)
CHECKS.register("recurrent", check_recurrent)
CHECKS.register("lsh", check_lsh)
CHECKS.register("universal", check_universal)
CHECKS.register("feedforward", check_feedforward)
