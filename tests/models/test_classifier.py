"""The classifier model kind: the member's trunk read at the last real token (models/classifier.py)."""
from __future__ import annotations

import pytest
import torch

from tfamily import members
from tfamily.build import build
from tfamily.models.classifier import LastToken


def _classifier(member: str, **kw):
    return build(members.get(member)(model="classifier", objective={"name": "classification", "params": {"n_classes": 5}},
                                     d_model=16, depth__n_layers=2, heads__n_heads=2, vocab_size=12, dropout=0.0, **kw))


def test_last_token_is_the_last_real_one():
    x = torch.arange(2 * 4 * 3.0).view(2, 4, 3)
    real = torch.tensor([[True, True, False, False], [True, True, True, True]])
    assert torch.equal(LastToken()(x, real), torch.stack([x[0, 1], x[1, 3]]))
    assert torch.equal(LastToken()(x), x[:, -1])


@pytest.mark.parametrize("member", ["gpt", "longformer", "bert"])
def test_padding_never_changes_the_class_logits(member):
    torch.manual_seed(0)
    model = _classifier(member).eval()
    assert model.sees_ahead == (member == "bert")  # the decoders stay causal
    x = torch.randint(1, 12, (2, 16))
    real = torch.ones(2, 16, dtype=torch.bool)
    real[0, 9:] = False
    other = x.clone()
    other[0, 9:] = torch.randint(1, 12, (7,))  # different padding content
    assert torch.allclose(model(x, key_padding=real), model(other, key_padding=real), atol=1e-6)
    loss, out = model.loss({"x": x, "y": torch.tensor([1, 4]), "key_padding": real})
    assert out["tokens"] == 2 and loss.requires_grad


def test_a_causal_member_reads_the_whole_input_at_its_last_token():
    torch.manual_seed(0)
    model = _classifier("gpt").eval()
    x = torch.randint(1, 12, (1, 16))
    y = x.clone()
    y[0, 0] = (x[0, 0] % 11) + 1  # the first token changes the class logits at the last one
    assert not torch.allclose(model(x), model(y))


def test_classification_needs_n_classes_and_a_classifier():
    with pytest.raises(ValueError, match="n_classes"):
        build(members.gpt(model="classifier", objective={"name": "classification"}, d_model=16, heads__n_heads=2,
                            depth__n_layers=1))
    with pytest.raises(ValueError, match="does not fit model 'decoder'"):
        members.gpt(objective={"name": "classification", "params": {"n_classes": 3}})
