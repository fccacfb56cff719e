"""The dual encoder: one shared encoder per input, [u, v, u * v, u - v] into an MLP."""
from __future__ import annotations

import torch

from tfamily import members
from tfamily.build import build
from tfamily.models.dual_encoder import PairHead


def _dual(member: str = "bert"):
    return build(members.get(member)(model="dual_encoder", d_model=16, depth__n_layers=1, heads__n_heads=2,
                                     vocab_size=12, dropout=0.0,
                                     objective={"name": "classification", "params": {"n_classes": 2}}))


def test_each_input_is_encoded_alone_by_one_encoder():
    torch.manual_seed(0)
    model = _dual().eval()
    x = torch.randint(1, 12, (3, 2, 10))
    real = torch.ones(3, 2, 10, dtype=torch.bool)
    real[1, 0, 6:] = False
    logits = model(x, key_padding=real)
    assert logits.shape == (3, 2)
    u = model.encoder(x[:, 0], key_padding=real[:, 0])
    v = model.encoder(x[:, 1], key_padding=real[:, 1])
    assert torch.allclose(logits, model.head(u, v), atol=1e-6)
    other = x.clone()
    other[1, 0, 6:] = 5  # padding content never matters
    assert torch.allclose(model(other, key_padding=real), logits, atol=1e-6)
    loss, out = model.loss({"x": x, "y": torch.tensor([0, 1, 1]), "key_padding": real})
    assert out["tokens"] == 3 and loss.requires_grad


def test_the_pair_head_combines_u_and_v_lra_style():
    head = PairHead(4, 2)
    u, v = torch.randn(5, 4), torch.randn(5, 4)
    first = head.mlp[0]
    assert first.in_features == 16
    expected = head.mlp[2](torch.relu(first(torch.cat([u, v, u * v, u - v], -1))))
    assert torch.allclose(head(u, v), expected)
