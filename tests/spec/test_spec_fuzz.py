"""Spec-space fuzzing (issue 13, "Done when"): hypothesis draws specs over every axis, the
names read from the registries, parameters from small tables of sizes that fit a 16-token
sequence, and now and then a bad value. The property: ``Spec.from_dict`` either refuses with
ValueError/TypeError, or the spec builds and runs forward and backward at tiny sizes with a
finite loss. Any other exception, anywhere, is a bug."""
from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfamily import build, registry
from tfamily.spec import Spec

N = 16  # tokens per row: every block, window and stride below divides or fits it

# Values for a pattern or kernel parameter that suit N; a key not listed keeps its default.
PARAM_VALUES = {
    "window": [1, 2, 4], "block": [2, 4, 8], "stride": [2, 4], "n_global": [1, 2], "dilation": [1, 2],
    "n_random": [1, 2], "summary": [1, 2], "memory": [0, 4], "width": [4], "block_h": [2], "block_w": [2, 4],
    "memory_h": [0, 1], "memory_w": [0, 2], "max_span": [4, 8], "causal": [True, False],
    "n_hashes": [1, 2], "bucket_size": [2, 4], "chunk_len": [4, 8], "block_size": [4, 8, 16],
    "same_bucket_only": [True, False], "clamp_len": [4, 16], "same_length": [True, False],
    "mask_prob": [0.15, 0.5], "bias": [True, False],
}
CONTAINERS = {"union", "intersect", "per_head"}
# FlexAttention compiles per shape (tens of seconds on CPU) and is forward-only on CPU in
# torch 2.13; its equality with the reference kernel is tested in tests/nn/kernels.
SLOW_KERNELS = ("flex",)
BAD = {"d_model": [0, -4, 8.5, "16"], "vocab_size": [1, 0, None], "dropout": [1.5, -0.1], "n_heads": [0, 3],
       "n_layers": [0, "2"], "name": ["nope"], "mem_len": [-1], "chunks": [0], "params": [{"bogus": 1}]}


def _names(axis: str) -> list[str]:
    return sorted(registry.AXES[axis])


@st.composite
def params_for(draw, axis: str, name: str) -> dict:
    keys = registry.AXES[axis].entry(name).params() or ()
    out = {}
    for key in keys:
        if key in PARAM_VALUES and draw(st.booleans()):
            out[key] = draw(st.sampled_from(PARAM_VALUES[key]))
    return out


@st.composite
def simple_pattern(draw) -> dict:
    name = draw(st.sampled_from([n for n in _names("pattern") if n not in CONTAINERS]))
    return {"name": name, "params": draw(params_for("pattern", name))}


@st.composite
def pattern(draw) -> dict:
    p = draw(simple_pattern())
    kind = draw(st.sampled_from(["simple", "container", "per_layer"]))
    if kind == "container":
        name = draw(st.sampled_from(sorted(CONTAINERS & set(_names("pattern")))))
        p = {"name": name, "params": {"patterns": draw(st.lists(simple_pattern(), min_size=1, max_size=2))}}
    elif kind == "per_layer":
        p["per_layer"] = draw(st.lists(simple_pattern(), min_size=1, max_size=2))
    return p


@st.composite
def axis(draw, name: str, exclude: tuple = ()) -> dict:
    choice = draw(st.sampled_from([n for n in _names(name) if n not in exclude]))
    return {"name": choice, "params": draw(params_for(name, choice))}


def _usually(draw, usual, anything):
    """``usual`` five times in six, else ``anything``: the axes' constraints on each other
    (an objective per model, reversible needs pre-norm, ...) would otherwise refuse most draws."""
    return draw(anything) if draw(st.integers(0, 5)) == 5 else usual


@st.composite
def spec_dict(draw) -> dict:
    model = draw(st.sampled_from(_names("model")))
    n_heads = draw(st.sampled_from([1, 2, 4]))
    kernel = draw(axis("kernel", exclude=SLOW_KERNELS))
    depth = draw(st.sampled_from(_names("depth")))
    if model == "encoder_decoder":  # a reversible pair has no place for cross-attention
        depth = _usually(draw, "stack", st.just(depth))
    state = "xl_memory" if model == "decoder" and draw(st.integers(0, 3)) == 0 else "kv_cache"
    d = {
        "member": "fuzz", "model": model, "vocab_size": draw(st.integers(5, 20)),
        "d_model": draw(st.sampled_from([8, 16])), "dropout": draw(st.sampled_from([0.0, 0.1])),
        "attn_dropout": draw(st.sampled_from([0.0, 0.1])), "tie_embeddings": draw(st.booleans()),
        "pattern": draw(pattern()), "kernel": kernel,
        # XL runs two segments: positions reach 2N.
        "position": {**draw(axis("position")), "max_len": draw(st.sampled_from([2 * N if state == "xl_memory"
                                                                                else N, 64]))},
        "heads": {"n_heads": n_heads, "n_kv_heads": draw(st.sampled_from([None, 1, n_heads])),
                  "shared_qk": _usually(draw, kernel["name"] == "lsh", st.booleans())},
        "residual": {"name": _usually(draw, "pre_norm", st.sampled_from(_names("residual")))
                     if depth == "reversible" else draw(st.sampled_from(_names("residual")))},
        "depth": {"name": depth, "n_layers": draw(st.integers(1, 2)),
                  "checkpointing": _usually(draw, False, st.booleans()) if depth == "reversible"
                  else draw(st.booleans())},
        "state": {"name": _usually(draw, state, st.sampled_from(_names("state"))),
                  "mem_len": draw(st.sampled_from([0, 8]))},
        "ff": {"activation": draw(st.sampled_from(_names("activation"))), "chunks": draw(st.sampled_from([1, 2]))},
        "objective": {"name": _usually(draw, draw(st.sampled_from(_fits(model))),
                                       st.sampled_from(_names("objective")))},
    }
    if draw(st.integers(0, 5)) == 0:  # one bad value somewhere
        key = draw(st.sampled_from(sorted(BAD)))
        bad = draw(st.sampled_from(BAD[key]))
        where = {"n_heads": d["heads"], "n_layers": d["depth"], "name": d[draw(st.sampled_from(
            ["pattern", "kernel", "position", "residual", "depth", "state"]))], "mem_len": d["state"],
            "chunks": d["ff"], "params": d[draw(st.sampled_from(["pattern", "kernel", "position"]))]}.get(key, d)
        where[key] = bad
    return d


def _fits(model: str) -> list[str]:
    """The objectives registered for ``model`` (drawn most of the time, so most specs are valid)."""
    return [o for o in _names("objective") if model in registry.AXES["objective"].entry(o).info.get("models", ())]


def _batch(spec: Spec) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, spec.vocab_size, (2, N), generator=g)
    if spec.model == "encoder_decoder" and spec.objective.name != "span_corruption":  # it corrupts text windows
        return {"src": x, "tgt_in": x.flip(1), "tgt_out": x}
    if spec.model != "decoder":
        return {"x": x}
    return {"x": x, "y": x.roll(-1, 1)}


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec_dict())
def test_every_spec_is_refused_cleanly_or_builds_and_trains(d):
    try:
        spec = Spec.from_dict(d)
    except (ValueError, TypeError):
        return
    torch.manual_seed(0)
    model = build(spec)
    batch = _batch(spec)
    if spec.state.name == "xl_memory":
        batch["state"] = model.new_state()
        model.loss(batch)[0].backward()  # a first segment fills the memory
    loss, _ = model.loss(batch)
    assert math.isfinite(float(loss.detach())), d
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads), d


def test_the_fuzzer_reaches_both_sides():
    """The strategy draws valid specs and refused ones (neither side is empty)."""
    seen = {"valid": 0, "refused": 0}

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(spec_dict())
    def count(d):
        try:
            Spec.from_dict(d)
            seen["valid"] += 1
        except (ValueError, TypeError):
            seen["refused"] += 1
    count()
    assert seen["valid"] >= 5 and seen["refused"] >= 5, seen

