"""The FlexAttention kernel equals the dense reference (forward: CPU FlexAttention is
inference-only in torch 2.13) and reuses its cached block mask. Each new shape
compiles for ~10 s, so one case runs by default and the catalogue is marked slow."""
from __future__ import annotations

import pytest
import torch

from tfamily.nn.kernels import FlexKernel, ReferenceKernel
from tfamily.nn.kernels.flex import check_device_block
from tfamily.nn.kernels.layout import PLANS
from tfamily.nn.patterns import Causal, longformer
from tfamily.nn.patterns.examples import examples

BLOCK = 16


def _qkv(n, m, h=4, h_kv=2, e=16):
    return torch.randn(2, h, n, e), torch.randn(2, h_kv, m, e), torch.randn(2, h_kv, m, e)


@torch.no_grad()
def test_flex_matches_reference_and_reuses_the_block_mask():
    # Not a multiple of the block, grouped-query heads, padded keys: one compile.
    pattern = longformer(12, 3)
    q, k, v = _qkv(77, 77)
    pad = torch.rand(2, 77) > 0.2
    kernel = FlexKernel(BLOCK)
    out, _ = kernel(q, k, v, pattern=pattern, key_padding=pad)
    ref, _ = ReferenceKernel()(q, k, v, pattern=pattern, key_padding=pad)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    builds = PLANS.builds
    plan = next(p for p in PLANS._plans.values() if "flex" in p.cache)
    mask = plan.cache["flex"]
    out2, _ = kernel(torch.randn_like(q), k, v, pattern=pattern, key_padding=pad)
    assert PLANS.builds == builds and plan.cache["flex"] is mask


def test_flex_refuses_cpu_training_and_dropout_with_the_fix():
    q, k, v = (t.requires_grad_() for t in _qkv(32, 32))
    with pytest.raises(ValueError, match="blocksparse"):
        FlexKernel(BLOCK)(q, k, v, pattern=longformer(4, 1))
    # Refused by name, in one line: the value, why, and the kernels that do apply dropout.
    with pytest.raises(ValueError, match=r"dropout_p=0\.1\).*no dropout.*renormalise.*kernel='blocksparse'"
                                         r".*kernel='sdpa'.*attn_dropout=0") as err:
        FlexKernel(BLOCK)(q.detach(), k.detach(), v.detach(), pattern=longformer(4, 1), dropout_p=0.1)
    assert "\n" not in str(err.value)


def test_flex_keeps_dropout_for_patterns_it_hands_to_sdpa():
    # Full and causal go to fused SDPA, which has dropout: a member with attn_dropout still trains.
    q, k, v = _qkv(32, 32, h_kv=4)
    torch.manual_seed(0)
    out, _ = FlexKernel(BLOCK)(q, k, v, pattern=Causal(), dropout_p=0.5)
    ref, _ = FlexKernel(BLOCK)(q, k, v, pattern=Causal())
    assert out.shape == ref.shape and not torch.allclose(out, ref)


def test_flex_on_cuda_refuses_tiles_its_gpu_kernels_cannot_hold():
    # Measured on an H100: block 32 fails to compile, 128 passes fwd+bwd for every pattern.
    with pytest.raises(ValueError, match="multiple of 128.*got 32.*blocksparse"):
        check_device_block("cuda", 32)
    check_device_block("cuda", 256)
    check_device_block("cpu", 32)  # CPU FlexAttention takes any block


@pytest.mark.slow
@pytest.mark.parametrize("name", list(examples(80, toys=True)))
@torch.no_grad()
def test_flex_matches_reference_for_every_pattern(name):
    pattern = examples(80, toys=True)[name]
    q, k, v = _qkv(80, 80)
    out, _ = FlexKernel(BLOCK)(q, k, v, pattern=pattern)
    ref, _ = ReferenceKernel()(q, k, v, pattern=pattern)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


@pytest.mark.slow
@torch.no_grad()
def test_flex_with_offset_and_bias():
    pattern = examples(80)["bigbird"]
    q, k, v = _qkv(50, 80)
    bias = torch.randn(1, 4, 50, 80)
    out, _ = FlexKernel(BLOCK)(q, k, v, pattern=pattern, q_offset=30, bias=bias)
    ref, _ = ReferenceKernel()(q, k, v, pattern=pattern, q_offset=30, bias=bias)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
