"""Spec checks that need the parts themselves, run on every ``Spec`` through ``registry.CHECKS``.

``spec.py`` checks names and numbers only and never imports ``nn/``; what only a part can
tell (which keyword parameters it takes, whether their values are valid, which pairs of
choices it cannot serve) is checked here, beside ``build.py``, by building the light parts
(patterns and kernels hold no weights) or reading their constructors' signatures.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .nn.gates import check_gate_bias
from .nn.patterns import resolve
from .registry import (CHECKS, DEPTHS, FEEDFORWARDS, KERNELS, OBJECTIVES, PATTERNS, POSITIONS, RESIDUALS,
                       STATES)

if TYPE_CHECKING:
    from .spec import Spec


def check_params(spec: Spec) -> None:
    """Unknown ``params`` keys are refused on every axis, naming the valid keys."""
    for reg, part in ((POSITIONS, spec.position), (STATES, spec.state), (FEEDFORWARDS, spec.ff),
                      (DEPTHS, spec.depth), (OBJECTIVES, spec.objective), (RESIDUALS, spec.residual)):
        reg.check_params(part.name, part.params)
    if "gate_bias" in spec.residual.params:  # a gate's b_g (nn/gates.py): checked before any weights exist
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
        from .nn.universal import check_act
        check_act(depth.n_layers, depth.params.get("eps", 0.01), depth.params.get("ponder_weight", 0.01))


CHECKS.register("params", check_params)
CHECKS.register("lsh", check_lsh)
CHECKS.register("universal", check_universal)
