"""Recurrent depths (nn/depth/recurrent.py) as language models: the hidden state carried over
segments equals one long forward (outputs and gradients; truncated BPTT stops gradients at
the boundary), the State protocol (save/load, reset rows, reorder), and generation."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.models.generate import generate
from tfamily.nn.depth import RNNState, check_right_padding
from tfamily.objectives.lm import token_loss

V = 17


def _lm(cell: str, seed: int = 0, n_layers: int = 2):
    torch.manual_seed(seed)
    name = {"rnn": "rnn_lm", "lstm": "lstm_lm", "gru": "gru_lm"}[cell]
    return tfamily.build(members.get(name)(vocab_size=V, d_model=24, dropout=0.0, depth__n_layers=n_layers))


def _tokens(seed: int, b: int = 3, n: int = 20):
    g = torch.Generator().manual_seed(100 + seed)
    x = torch.randint(0, V, (b, n + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def _cuts(seed: int, n: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    inner = sorted(set(torch.randint(1, n, (3,), generator=g).tolist()))
    return [0, *inner, n]


def _grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_state_carried_over_segments_equals_one_long_forward(cell, seed):
    model = _lm(cell, seed)
    x, y = _tokens(seed)
    long = model(x)
    token_loss(long, y)[0].mul(x.numel()).backward()
    ref = _grads(model)
    model.zero_grad()
    state, outs, total = model.new_state(truncate=False), [], 0.0
    cuts = _cuts(seed, x.shape[1])
    for a, b in zip(cuts, cuts[1:]):
        out = model(x[:, a:b], state=state)
        outs.append(out)
        total = total + token_loss(out, y[:, a:b])[0] * out.shape[0] * out.shape[1]
    total.backward()
    assert state.offset == x.shape[1]
    assert torch.allclose(torch.cat(outs, 1), long, atol=1e-6)
    for g, r in zip(_grads(model), ref):
        assert torch.allclose(g, r, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_truncated_bptt_keeps_outputs_and_stops_gradients_at_the_boundary(seed):
    model = _lm("lstm", seed)
    x, y = _tokens(seed)
    state = model.new_state()  # truncate=True: what the trainer carries
    first = model(x[:, :8], state=state)
    h, c = state.h, state.c
    assert not h.requires_grad and not c.requires_grad
    second = model(x[:, 8:], state=state)
    assert torch.allclose(torch.cat([first, second], 1), model(x), atol=1e-6)
    token_loss(second, y[:, 8:])[0].backward()
    truncated = _grads(model)
    # The same segment started from the carried values as constants: the same gradients.
    model.zero_grad()
    fresh = model.new_state()
    fresh.h, fresh.c = h.clone(), c.clone()
    token_loss(model(x[:, 8:], state=fresh), y[:, 8:])[0].backward()
    for g, r in zip(_grads(model), truncated):
        assert torch.equal(g, r)
    # ...and not the gradients that flow through the first segment.
    model.zero_grad()
    full = model.new_state(truncate=False)
    model(x[:, :8], state=full)
    token_loss(model(x[:, 8:], state=full), y[:, 8:])[0].backward()
    assert any(not torch.allclose(g, r) for g, r in zip(_grads(model), truncated))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_state_dict_round_trip_reset_and_reorder(cell):
    model = _lm(cell).eval()
    x, _ = _tokens(3)
    state = model.new_state()
    model(x[:, :10], state=state)
    saved = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in state.state_dict().items()}
    after = model(x[:, 10:], state=state)
    restored = model.new_state()
    restored.load_state_dict(saved)
    assert torch.equal(model(x[:, 10:], state=restored), after)
    # Reset row 1: it continues as a fresh stream; the other rows keep their history.
    state = model.new_state()
    state.load_state_dict(saved)
    state.reset(torch.tensor([1]))
    out = model(x[:, 10:], state=state)
    assert torch.allclose(out[1], model(x[1:2, 10:])[0], atol=1e-6)
    assert torch.equal(out[[0, 2]], after[[0, 2]])
    # Reorder keeps rows in the given order (beam search).
    state = model.new_state()
    state.load_state_dict(saved)
    state.reorder(torch.tensor([2, 0]))
    assert torch.allclose(model(x[[2, 0], 10:], state=state), after[[2, 0]], atol=1e-6)
    state.reset()
    assert state.h is None and state.offset == 0
    with pytest.raises(ValueError, match="'lstm' stack"):
        RNNState("gru").load_state_dict({"offset": 0, "cell": "lstm"})


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_generate_with_the_carried_state_equals_recomputing_the_whole_prefix(cell):
    model = _lm(cell, 4)
    prompt, _ = _tokens(4, b=2, n=5)
    a = generate(model, prompt, 12, greedy=True)
    b = generate(model, prompt, 12, greedy=True, use_cache=False)
    assert torch.equal(a, b) and a.shape == (2, 17)


def test_right_padding_is_harmless_and_left_padding_refused():
    check_right_padding(torch.tensor([[True, True, False], [True, True, True]]))
    with pytest.raises(ValueError, match="pad on the right"):
        check_right_padding(torch.tensor([[False, True, True]]))


@pytest.mark.parametrize("override, match", [
    (dict(state__name="kv_cache"), "recurrent depth carries its hidden state"),
    (dict(depth__params={"alignment": "dot"}), "language model .* takes none"),
    (dict(model="encoder", objective__name="masked_lm"), "reads left to right"),
    (dict(position__name="relative"), "enters attention scores"),
    (dict(depth__checkpointing=True), "not layers to recompute"),
])
def test_invalid_pairs_are_refused_naming_both_choices(override, match):
    with pytest.raises(ValueError, match=match):
        members.lstm_lm(**override)
    with pytest.raises(ValueError, match="recurrent depth carries"):
        members.gpt(state__name="rnn_hidden")


@pytest.mark.parametrize("name", ["rnn_lm", "lstm_lm", "gru_lm", "lstm_seq2seq", "luong_attention",
                                  "bahdanau_attention"])
def test_the_size_estimate_is_a_lower_bound_for_recurrent_members(name):
    from tfamily.spec.sizes import param_count
    spec = members.get(name)(vocab_size=V)
    with torch.device("meta"):
        model = tfamily.build(spec)
    real = sum(p.numel() for p in model.parameters())
    assert 0.3 * real <= param_count(spec) <= real, (param_count(spec), real)
