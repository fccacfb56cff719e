"""What a spec chooses on each axis, in words (``Spec.choices``: `tfamily members`, the tour, ``--json``).
Reads a spec's fields only; imports no spec, so ``spec/__init__.py`` can call it."""
from __future__ import annotations

from typing import Any

from .. import registry


def choices(spec) -> dict[str, Any]:
    """The value chosen on each axis (for ``tfamily members --json``)."""
    per_layer = [p.name for p in spec.pattern.per_layer]
    return {
        "pattern": "+".join(per_layer) if per_layer else spec.pattern.name,
        "kernel": spec.kernel.name,
        "position": spec.position.name,
        "heads": ("multi-query" if spec.heads.kv_heads == 1 and spec.heads.n_heads > 1 else
                  "grouped-query" if spec.heads.kv_heads < spec.heads.n_heads else "multi-head")
        + (" shared-qk" if spec.heads.shared_qk else ""),
        "residual": spec.residual.name + ("" if spec.norm.name == "layer_norm" else f" {spec.norm.name}"),
        "depth": spec.depth.name + (" checkpointed" if spec.depth.checkpointing else ""),
        "state": spec.state.name,
        "feed_forward": spec.ff.name + (f" x{spec.ff.chunks} chunks" if spec.ff.chunks > 1 else ""),
        "objective": spec.objective.name,
        "init": spec.init.name + "".join(f" {k}={v}" for k, v in sorted(spec.init.params.items())),
        "dropout": _dropout(spec),
        **(_recurrent(spec) if registry.DEPTHS.entry(spec.depth.name).info.get("recurrent") else {}),
    }

def _dropout(spec) -> str:
    sites = {"embed": "embedding", "attn": "attention probabilities", "residual": "sublayer outputs",
             "ff": "feed-forward hidden"}
    rates: dict[float, list[str]] = {}
    for site, label in sites.items():
        if spec.dropout_at(site) > 0:
            rates.setdefault(spec.dropout_at(site), []).append(label)
    return "; ".join(f"{p:g} on {', '.join(where)}" for p, where in rates.items()) or "none"

def _recurrent(spec) -> dict[str, str]:
    """A recurrent depth (RNN/LSTM/GRU) has no attention pattern, kernel, heads,
    residual or feed-forward: the recurrence is the only path between positions. As an
    encoder-decoder its params say how the decoder reads the encoder."""
    p = spec.depth.params
    depth = spec.depth.name
    if spec.model == "encoder_decoder":
        attend, alignment = p.get("attend", "luong"), p.get("alignment", "general")
        feeding = p.get("input_feeding", True) and attend == "luong" and alignment != "none"
        depth += (f" ({'bidirectional encoder, ' if p.get('bidirectional') else ''}{attend} decoder, "
                  f"alignment {alignment}{', input feeding' if feeding else ''})")
    return {"pattern": "none", "kernel": "none", "heads": "none", "residual": "none", "feed_forward": "none",
            "depth": depth}
