"""LoRA as a weight parametrization (nn/lora.py): the start equals the base, only the factors
train, the merged layer equals the adapted one, and paths that read the weight see the update."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tfamily.nn.heads.projection import QKVProjection
from tfamily.nn.lora import add_lora, is_adapter, merge


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 8))


def test_starts_as_the_base_and_merges_to_the_adapted_output():
    model, x = _model(), torch.randn(3, 8)
    want = model(x)
    names = add_lora(model, rank=2, alpha=4.0, targets=("0", "2"))
    assert names == ["0", "2"] and torch.equal(model(x), want)  # B = 0: W + 0, bit for bit
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_adapter(name):
                p.normal_()
    adapted = model(x)
    assert not torch.allclose(adapted, want)
    merge(model)
    assert not any(is_adapter(n) for n, _ in model.named_parameters())
    assert isinstance(model[0], nn.Linear) and torch.allclose(model(x), adapted, atol=1e-6)


def test_a_path_that_slices_the_weight_sees_the_update():
    # QKVProjection reads qkv_proj.weight's rows directly for XL memory and cross-attention.
    torch.manual_seed(0)
    proj = QKVProjection(16, 2, 2, 8)
    add_lora(proj, rank=2, alpha=2.0, targets=("qkv_proj",))
    with torch.no_grad():
        proj.qkv_proj.parametrizations.weight[0].lora_b.normal_()
    x = torch.randn(2, 5, 16)
    fused = proj.qkv(x, x)
    apart = (proj.q(x), *proj.kv(x))
    for a, b in zip(fused, apart):
        assert torch.allclose(a, b, atol=1e-5)


def test_refusals_name_the_value():
    with pytest.raises(ValueError, match="match no linear layer"):
        add_lora(_model(), rank=2, alpha=1.0, targets=("qkv_proj",))
    with pytest.raises(ValueError, match="lora.rank"):
        add_lora(_model(), rank=99, alpha=1.0, targets=("0",))
    with pytest.raises(ValueError, match="lora.alpha"):
        add_lora(_model(), rank=2, alpha=0.0, targets=("0",))
