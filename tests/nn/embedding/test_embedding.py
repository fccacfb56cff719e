"""Token embedding (scaled by sqrt(d_model), Vaswani et al. 2017, section 3.4), the
tied output head, and the token-id checks."""
from __future__ import annotations

import math

import pytest
import torch

from tfamily.nn.embedding import LMHead, TokenEmbedding


def test_embedding_scale_and_tied_head():
    emb = TokenEmbedding(11, 16)
    tok = torch.tensor([[0, 3, 10]])
    torch.testing.assert_close(emb(tok), emb.weight[tok] * math.sqrt(16))
    head = LMHead(16, 11, tied=emb)
    x = torch.randn(1, 3, 16)
    # T5's output rescaling (Raffel et al. 2020): the tied head starts reading h / sqrt(d_model).
    torch.testing.assert_close(head(x), x @ emb.weight.t() / math.sqrt(16))
    assert head.proj is None and list(head.parameters()) == [head.logit_scale, emb.weight]
    assert LMHead(16, 11)(x).shape == (1, 3, 11)
    assert LMHead(16, 11).logit_scale is None


def test_tied_logit_scale_is_learned():
    emb = TokenEmbedding(11, 16)
    head = LMHead(16, 11, tied=emb)
    x, y = torch.randn(2, 5, 16), torch.randint(0, 11, (2, 5))
    torch.nn.functional.cross_entropy(head(x).flatten(0, 1), y.flatten()).backward()
    assert head.logit_scale.dim() == 0 and head.logit_scale.grad.abs() > 0
    with torch.no_grad():
        head.logit_scale.fill_(2.0)
    torch.testing.assert_close(head(x), 2.0 * x @ emb.weight.t())


@pytest.mark.parametrize("d_model", [32, 256, 1024])
def test_tied_head_does_not_read_back_the_input_token(d_model):
    """A stream that is only the normalised token embedding (an untrained model) gets an
    own-token logit of at most 1 and others near 0, at every width: near-uniform output."""
    emb = TokenEmbedding(65, d_model)
    head = LMHead(d_model, 65, tied=emb)
    tok = torch.randint(0, 65, (4, 32))
    logits = head(torch.nn.functional.layer_norm(emb(tok), (d_model,)))
    own = logits.gather(-1, tok[..., None])
    # cos(h, e) |e|: at most the row's norm (about 1), never sqrt(d) |e| as before.
    assert (own > 0.5).all() and (own <= emb.weight.norm(dim=-1)[tok][..., None] + 1e-4).all()
    others = logits.scatter(-1, tok[..., None], 0.0)
    assert others.abs().max() < 8 / math.sqrt(d_model)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.randint(0, 65, (4 * 32,)))
    assert abs(loss.item() - math.log(65)) < 0.03 * math.log(65)


@pytest.mark.parametrize("d_model", [32, 256, 1024])
def test_untied_head_starts_with_small_logits(d_model):
    torch.manual_seed(d_model)
    head = LMHead(d_model, 256)
    h = torch.nn.functional.layer_norm(torch.randn(8, 16, d_model), (d_model,))
    # |h| = sqrt(d) and weights of std 1/d: logits of std 1/sqrt(d).
    assert head(h).std().item() == pytest.approx(d_model ** -0.5, rel=0.1)


@pytest.mark.parametrize("bad", [-1, 11, 500])
def test_token_outside_vocabulary_names_the_id(bad):
    emb = TokenEmbedding(11, 8)
    with pytest.raises(ValueError, match=rf"token id {bad} .*\[0, 10\]"):
        emb(torch.tensor([[1, bad, 2]]))


def test_token_dtype_and_rank_are_checked():
    emb = TokenEmbedding(11, 8)
    with pytest.raises(TypeError, match="torch.float32"):
        emb(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"\(3,\)"):
        emb(torch.zeros(3, dtype=torch.long))


def test_token_check_does_not_read_values_back_off_cpu():
    # On an accelerator the range check runs on the device (no host sync per forward);
    # a meta tensor has no values to read, so a host-side check would raise here.
    from tfamily.nn.embedding import check_tokens
    check_tokens(torch.zeros(2, 3, dtype=torch.long, device="meta"), 10)
