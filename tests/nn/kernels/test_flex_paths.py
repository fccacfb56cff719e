"""The flex kernel's natural-order fast path (no gathers, the pattern's own mask_mod, no output
clean-up) equals its general path (gathers, the plan's position tables, nan_to_num and the live
mask) and the dense reference, on fresh random inputs. Forward only: CPU FlexAttention is
inference-only in torch 2.13. Each distinct graph compiles for a few seconds."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from tfamily.nn.kernels import FlexKernel, ReferenceKernel, flex
from tfamily.nn.kernels.layout import PLANS, get_plan, split
from tfamily.nn.patterns.examples import examples

BLOCK = 32


def _qkv(n, h=4, e=16):
    return (torch.randn(2, h, n, e) for _ in range(3))


def _forced_general(monkeypatch):
    """Make every plan look permuted, padded and partly empty, so the kernel takes its general
    path (identity gathers, the plan's mask_mod, clean-up) on the same tiles as the fast path."""
    real = flex.get_plan

    def general(*args, **kwargs):
        plan = real(*args, **kwargs)
        return dataclasses.replace(plan, q_identity=False, k_identity=False, all_live=False, cache={})
    monkeypatch.setattr(flex, "get_plan", general)


@pytest.mark.parametrize("name", ["sliding_window", "bigbird"])
def test_natural_order_is_detected_and_holds_the_patterns_own_mask_mod(name):
    pattern = examples(128)[name]
    (qo, parts), = split(pattern)
    plan = get_plan(parts, qo, 128, 128, 0, BLOCK, None, torch.device("cpu"))
    assert flex.natural_order(plan, 0)
    assert not flex.natural_order(plan, 3)  # a query offset shifts positions: the plan's tables map them
    padded = get_plan(parts, qo, 120, 120, 0, BLOCK, None, torch.device("cpu"))
    assert not flex.natural_order(padded, 0)  # 120 is padded to whole tiles
    mask = flex._block_mask(plan, parts, 0)
    assert mask.mask_mod.__func__ is type(parts[0]).mask_mod and mask.mask_mod.__self__ is parts[0]


def test_permuted_patterns_are_not_natural():
    (qo, parts), = split(examples(128, toys=True)["strided_columns"])
    plan = get_plan(parts, qo, 128, 128, 0, BLOCK, None, torch.device("cpu"))
    assert qo is not None and not flex.natural_order(plan, 0)


@torch.no_grad()
def test_fast_path_equals_general_path_and_reference(monkeypatch):
    pattern = examples(128)["sliding_window"]
    q, k, v = _qkv(128)
    ref, _ = ReferenceKernel()(q, k, v, pattern=pattern)
    fast, _ = FlexKernel(BLOCK)(q, k, v, pattern=pattern)
    PLANS.clear()
    with monkeypatch.context() as m:
        _forced_general(m)
        general, _ = FlexKernel(BLOCK)(q, k, v, pattern=pattern)
    PLANS.clear()  # the forced plans must not serve later tests
    torch.testing.assert_close(fast, ref, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(fast, general, atol=2e-5, rtol=1e-4)


@torch.no_grad()
def test_per_head_pattern_runs_flex_on_every_head_group():
    # With as many kv heads as query heads the per-head split used to hand the groups to the
    # compiled blocksparse kernel, which needs a dropout_p the flex kernel does not carry.
    pattern = examples(128)["strided_heads"]
    q, k, v = _qkv(128)
    out, _ = FlexKernel(BLOCK)(q, k, v, pattern=pattern)
    ref, _ = ReferenceKernel()(q, k, v, pattern=pattern)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
