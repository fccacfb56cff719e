"""Union, intersection, difference and per-head mixes; specs that nest them."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.nn.patterns import (PATTERNS, Causal, Difference, Full, GlobalTokens, Intersect, Local1D,
                                 PerHead, SlidingWindow, StridedColumns, Union, dense_mask, resolve)


def test_combinators_are_the_logical_combinations():
    a, b = SlidingWindow(6), StridedColumns(5)
    ma, mb = dense_mask(a, 40, 40), dense_mask(b, 40, 40)
    assert torch.equal(dense_mask(Union(a, b), 40, 40), ma | mb)
    assert torch.equal(dense_mask(Intersect(a, b), 40, 40), ma & mb)
    assert torch.equal(dense_mask(Difference(a, (b,)), 40, 40), ma & ~mb)


def test_per_head_cycles_patterns_over_heads():
    parts = [SlidingWindow(3), Local1D(4, 2), GlobalTokens(2)]
    m = dense_mask(PerHead(parts), 30, 30, n_heads=5)
    for h in range(5):
        assert torch.equal(m[h], dense_mask(parts[h % 3], 30, 30)[0])


def test_flags_follow_the_members():
    assert Union(Causal(), SlidingWindow(3)).causal and not Union(Causal(), Full()).causal
    assert Intersect(Full(), Causal()).causal
    assert PerHead([Causal()]).per_head and not Union(Causal()).per_head
    assert Union(Causal(), SlidingWindow(3), name="mine").name == "mine"


def test_bad_members_are_refused():
    with pytest.raises(ValueError, match="at least one"):
        Union()
    with pytest.raises(TypeError, match="str"):
        PerHead(["causal"])


def test_spec_level_union_and_per_head_resolve_nested_sub_specs():
    spec = {"name": "union", "params": {"patterns": [
        {"name": "sliding_window", "params": {"window": 4}},
        {"name": "per_head", "params": {"patterns": [{"name": "global_tokens", "params": {"n_global": 2}},
                                                     {"name": "bigbird", "params": {"block": 4}}]}}]}}
    p = resolve(spec, layer=3)
    assert p == Union(SlidingWindow(4), PerHead([GlobalTokens(2), PATTERNS["bigbird"](block=4, layer=3)]))


def test_unknown_names_and_params_are_reported():
    with pytest.raises(ValueError, match="unknown pattern 'windowed'; valid choices: .*sliding_window"):
        resolve({"name": "union", "params": {"patterns": [{"name": "windowed"}]}})
    with pytest.raises(ValueError, match=r"\['width'\] for pattern 'sliding_window'; valid keys: "
                                         r"window, causal, dilation, name"):
        resolve({"name": "sliding_window", "params": {"width": 3}})


def test_union_spec_builds_into_a_model_with_gqa():
    spec = members.gpt(d_model=32, heads__n_heads=4, heads__n_kv_heads=2, depth__n_layers=1,
                       position__max_len=64, kernel={"name": "blocksparse", "params": {"block_size": 8}},
                       pattern={"name": "union", "params": {"patterns": [
                           {"name": "sliding_window", "params": {"window": 4}},
                           {"name": "strided_columns", "params": {"stride": 5}}]}})
    model = tfamily.build(spec)
    assert model.stack.blocks[0].attn.pattern == Union(SlidingWindow(4), StridedColumns(5))
    x = torch.randint(0, 256, (2, 40))
    loss, _ = model.loss({"x": x[:, :-1], "y": x[:, 1:]})
    loss.backward()
    assert torch.isfinite(loss)
