"""Token types (BERT's segments, Devlin et al. 2019): each token's input gains its type's row, type 0
when none are given; a model without the table refuses types, and the spec refuses them where there
is no single input to segment."""
from __future__ import annotations

import pytest
import torch

from tfamily import build, members
from tfamily.nn.embedding import NoTokenTypes, TokenTypes


def test_each_token_gains_its_types_row_and_none_means_type_0():
    types = TokenTypes(3, 8)
    x = torch.randn(2, 5, 8)
    t = torch.tensor([[0, 0, 1, 1, 2], [0, 1, 2, 0, 1]])
    torch.testing.assert_close(types(x, t), x + types.weight[t])
    torch.testing.assert_close(types(x), x + types.weight[0])
    torch.testing.assert_close(NoTokenTypes()(x), x)


@pytest.mark.parametrize("bad, exc, words", [
    (torch.tensor([[0, 1, 2]]), ValueError, ["token type 2", "[0, 1]", "token_types=2"]),
    (torch.tensor([[0, -1, 1]]), ValueError, ["token type -1"]),
    (torch.tensor([[0, 1]]), ValueError, ["shape (1, 2)", "(1, 3)", "one type per token"]),
    (torch.tensor([[0.0, 1.0, 0.0]]), TypeError, ["integer tensor", "float32"]),
])
def test_bad_types_are_refused_naming_them(bad, exc, words):
    with pytest.raises(exc) as e:
        TokenTypes(2, 4)(torch.randn(1, 3, 4), bad)
    assert all(w in str(e.value) for w in words), e.value


def _bert(**kw):
    return members.get("bert")(vocab_size=31, d_model=16, heads={"n_heads": 2}, depth={"n_layers": 1},
                               position={"max_len": 16}, dropout=0.0, **kw)


@pytest.mark.parametrize("model", ["encoder", "classifier"])
def test_a_model_with_token_types_reads_them_and_one_without_refuses_them(model):
    over = {} if model == "encoder" else {"model": "classifier", "objective": {"name": "classification",
                                                                               "params": {"n_classes": 3}}}
    ids = torch.randint(0, 31, (2, 8))
    pair = torch.zeros_like(ids)
    pair[:, 4:] = 1
    torch.manual_seed(0)
    plain = build(_bert().override(over)).eval()
    torch.manual_seed(0)
    typed = build(_bert(token_types=2).override(over)).eval()
    with torch.no_grad():
        typed.types.weight[0].zero_()  # row 0 zero: equal to the model without the table ...
        torch.testing.assert_close(typed(ids), plain(ids))
        torch.testing.assert_close(typed(ids, token_types=torch.zeros_like(ids)), plain(ids))
        assert (typed(ids, token_types=pair) - plain(ids)).abs().max() > 1e-3  # ... until a token is type 1
        with pytest.raises(ValueError, match="no token-type table .*token_types=0.*build it with token_types=2"):
            plain(ids, token_types=pair)


def test_the_spec_refuses_token_types_without_a_single_input():
    with pytest.raises(ValueError, match="token_types=2 with model 'encoder_decoder'.*set token_types=0"):
        members.get("vanilla")(token_types=2)
    with pytest.raises(ValueError, match="token_types"):
        _bert(token_types=-1)
