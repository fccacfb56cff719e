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
    torch.testing.assert_close(head(x), x @ emb.weight.t())
    assert head.proj is None and list(head.parameters()) == [emb.weight]
    assert LMHead(16, 11)(x).shape == (1, 3, 11)


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
