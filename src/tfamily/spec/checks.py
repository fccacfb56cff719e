"""Checks on a spec's names and numbers that need no part (``Spec.__post_init__`` runs them); checks
that need a part register in ``tfamily/spec/part_checks.py`` through ``registry.CHECKS``."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Spec


def _per_layer_fits_depth(spec: Spec) -> None:
    # A list longer than the depth would hold layers that do not exist; a shorter one cycles.
    n = len(spec.pattern.per_layer)
    if n > spec.depth.n_layers:
        raise ValueError(f"pattern.per_layer has {n} entries for depth.n_layers={spec.depth.n_layers}; give at most "
                         f"{spec.depth.n_layers} (a shorter list cycles over the layers), or raise depth.n_layers")


def _xl_memory_needs_decoder(spec: Spec) -> None:
    # Segment memory is carried by LanguageModel calls; the encoder sees whole inputs and
    # the encoder-decoder's decoder state is a KV cache.
    if spec.state.name == "xl_memory" and spec.model != "decoder":
        raise ValueError(f"state 'xl_memory' needs model 'decoder', got model {spec.model!r}; "
                         f"use state 'kv_cache' or 'none' for {spec.model!r}")


def _check_reversible(spec: Spec) -> None:
    # Kitaev et al. 2020, section 3 (RevNet, Gomez et al. 2017).
    if spec.depth.name != "reversible":
        return
    if spec.residual.name != "pre_norm":
        raise ValueError(f"depth 'reversible' with residual {spec.residual.name!r}: y1 = x1 + F(x2) "
                         f"is invertible only for an additive residual; use residual 'pre_norm'")
    if spec.model == "encoder_decoder":
        raise ValueError("depth 'reversible' with model 'encoder_decoder': a reversible layer pairs "
                         "one attention with one feed-forward and has no place for cross-attention; "
                         "use model 'decoder' or 'encoder'")
    if spec.depth.checkpointing:
        raise ValueError("depth 'reversible' with depth.checkpointing=True: the reversible stack "
                         "already recomputes activations; set checkpointing=False")


def _al_rfou_needs_a_stack(spec: Spec) -> None:
    # Al-Rfou et al. 2019, section 2.3: a classifier per layer needs each layer's own output.
    if spec.objective.name == "al_rfou" and spec.depth.name != "stack":
        raise ValueError(f"objective 'al_rfou' with depth {spec.depth.name!r}: its intermediate-layer "
                         f"classifiers read the output of each distinct layer; use depth 'stack'")


def _token_types_need_one_input(spec: Spec) -> None:
    # Devlin et al. 2019: the segments of one input; an encoder-decoder's two inputs are apart already.
    if spec.token_types and spec.model == "encoder_decoder":
        raise ValueError(f"token_types={spec.token_types} with model 'encoder_decoder': token types mark the "
                         f"segments of one input, and its source and target are two; set token_types=0")


# Checks on names and numbers only; those needing a part register in tfamily/spec/part_checks.py.
SPEC_CHECKS = (_xl_memory_needs_decoder, _check_reversible, _al_rfou_needs_a_stack, _per_layer_fits_depth,
               _token_types_need_one_input)
