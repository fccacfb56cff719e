"""The decoder LM (GPT) and the encoder with a masked-LM head (BERT): causality,
padding invariance, KV-cached decoding equal to full recomputation, and the input
checks that reach the user."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.models import MLMHead

V = 23
SMALL = dict(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=2, heads__n_heads=4, ff__d_ff=64)


def _gpt(n_kv=None, kernel="sdpa", **kw):
    return tfamily.build(members.gpt(**{**SMALL, **kw}, heads__n_kv_heads=n_kv, kernel__name=kernel,
                                     position__max_len=32)).eval()


def _bert(**kw):
    return tfamily.build(members.bert(**{**SMALL, **kw}, position__max_len=32)).eval()


@pytest.mark.parametrize("kernel", ["sdpa", "reference"])
def test_gpt_changing_the_future_never_changes_the_past(kernel):
    model = _gpt(2, kernel)
    x = torch.randint(0, V, (2, 10))
    base = model(x)
    for t in range(9):
        y = x.clone()
        y[:, t + 1:] = torch.randint(0, V, (2, 9 - t))
        out = model(y)
        torch.testing.assert_close(out[:, :t + 1], base[:, :t + 1], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])  # the future did change


def test_gpt_with_dropout_is_causal_in_eval_mode():
    model = _gpt(dropout=0.3)
    x = torch.randint(0, V, (1, 8))
    y = x.clone()
    y[:, 5:] = (y[:, 5:] + 1) % V
    torch.testing.assert_close(model(x)[:, :5], model(y)[:, :5])


@pytest.mark.parametrize("kernel", ["sdpa", "reference"])
def test_bert_padded_tokens_do_not_change_real_positions(kernel):
    model = _bert(kernel__name=kernel)
    x = torch.randint(0, V - 1, (2, 9))
    pad = torch.ones(2, 9, dtype=torch.bool)
    pad[1, 6:] = False
    y = x.clone()
    y[1, 6:] = (y[1, 6:] + 5) % (V - 1)
    a, b = model(x, key_padding=pad), model(y, key_padding=pad)
    torch.testing.assert_close(a[1, :6], b[1, :6], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a[0], b[0], atol=1e-5, rtol=1e-5)
    # Without the padding mask the same change does reach the real positions.
    assert not torch.allclose(model(x)[1, :6], model(y)[1, :6], atol=1e-4)


def test_gpt_left_padding_keeps_real_positions_independent_of_pad_ids():
    model = _gpt(2)
    x = torch.randint(0, V, (2, 8))
    pad = torch.ones(2, 8, dtype=torch.bool)
    pad[0, :3] = False
    y = x.clone()
    y[0, :3] = (y[0, :3] + 7) % V
    a, b = model(x, key_padding=pad), model(y, key_padding=pad)
    assert torch.isfinite(a).all()
    torch.testing.assert_close(a[0, 3:], b[0, 3:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_kv", [2, 1])
@pytest.mark.parametrize("kernel", ["sdpa", "reference"])
def test_kv_cache_decoding_equals_full_recomputation(n_kv, kernel):
    model = _gpt(n_kv, kernel)
    x = torch.randint(0, V, (3, 14))
    state = model.new_state()
    prefill = model(x[:, :4], state=state)  # a prompt in one call, then one token per step
    torch.testing.assert_close(prefill, model(x[:, :4]), atol=1e-5, rtol=1e-5)
    for t in range(4, 14):
        step = model(x[:, t:t + 1], state=state)[:, -1]
        full = model(x[:, :t + 1])[:, -1]
        torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-5, msg=lambda s: f"step {t}: {s}")
    assert state[0].cache.length == 14


def test_explicit_offset_selects_positions():
    model = _gpt()
    x = torch.randint(0, V, (1, 5))
    assert not torch.allclose(model(x), model(x, offset=3))


def test_bert_has_an_mlm_head_and_gpt_does_not():
    assert isinstance(_bert().head, MLMHead)
    assert not isinstance(_gpt().head, MLMHead)


def test_sequence_longer_than_learned_table_names_lengths():
    model = _gpt()  # max_len 32
    model(torch.zeros(1, 32, dtype=torch.long))
    with pytest.raises(ValueError, match="33.*max_len=32"):
        model(torch.zeros(1, 33, dtype=torch.long))
    state = model.new_state()
    model(torch.zeros(1, 32, dtype=torch.long), state=state)
    with pytest.raises(ValueError, match="33.*max_len=32"):
        model(torch.zeros(1, 1, dtype=torch.long), state=state)


@pytest.mark.parametrize("bad", [-1, V, V + 10])
def test_token_ids_outside_vocabulary_name_the_id(bad):
    x = torch.zeros(1, 4, dtype=torch.long)
    x[0, 2] = bad
    with pytest.raises(ValueError, match=rf"token id {bad}\b.*\[0, {V - 1}\]"):
        _gpt()(x)
    bert = _bert()   # id V is BERT's reserved [MASK], a valid input
    if bad == V:
        assert bert(x).shape == (1, 4, V + 1)
    else:
        with pytest.raises(ValueError, match=rf"token id {bad}\b.*\[0, {V}\]"):
            bert(x)


def test_key_padding_of_wrong_shape_or_dtype_is_refused():
    model = _bert()
    x = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        model(x, key_padding=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="float32"):
        model(x, key_padding=torch.ones(2, 5))


@pytest.mark.parametrize("position,dropout", [("learned", 0.1), ("rotary", 0.0)])
def test_compiled_gpt_loss_is_one_graph(position, dropout):
    """``train.compile`` gets the whole loss as one graph: the CPU range checks of tokens and
    targets, the attention-dropout path and rotary's table cache all stay traceable (a graph
    break costs a host round trip per step on a GPU)."""
    torch._dynamo.reset()
    model = tfamily.build(members.gpt(d_model=32, vocab_size=11, dropout=dropout, depth=dict(n_layers=1),
                                      heads=dict(n_heads=2), position=dict(name=position, max_len=64)))
    x, y = torch.randint(0, 11, (2, 64)), torch.randint(0, 11, (2, 64))
    explained = torch._dynamo.explain(lambda b: model.loss(b)[0])({"x": x, "y": y})
    assert explained.graph_break_count == 0, [b.reason.splitlines()[0] for b in explained.break_reasons]


def test_gpt_exports_with_torch_export_and_keeps_its_token_check():
    """``torch.export`` traces the whole forward (the token range check runs on the device while
    tracing), the exported program computes the same logits, and an out-of-range id still fails."""
    model = tfamily.build(members.gpt(d_model=32, vocab_size=11, depth=dict(n_layers=1), heads=dict(n_heads=2),
                                      position=dict(max_len=16))).eval()
    x = torch.randint(0, 11, (2, 16))
    program = torch.export.export(model, (x,))
    torch.testing.assert_close(program.module()(x), model(x))
    bad = x.clone()
    bad[0, 3] = 11
    with pytest.raises(RuntimeError, match="outside the vocabulary"):
        program.module()(bad)
