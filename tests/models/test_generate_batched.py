"""Prompts of different lengths in one left-padded batch: every row continues exactly as it
would alone (greedy and seeded sampling, with and without the KV cache), the step-by-step
``stream``, and the one-line refusals where padding or generation cannot be right."""
from __future__ import annotations

import pytest
import torch

import tfamily
from tfamily import members
from tfamily.models.generate import generate, left_pad, stream
from tfamily.nn.state import new_state

V = 12
SMALL = dict(d_model=32, dropout=0.0, vocab_size=V, depth__n_layers=2, heads__n_heads=4, ff__d_ff=64)
LENGTHS = (5, 2, 9, 1)


def _model(member: str, **kw):
    torch.manual_seed(0)
    sizes = SMALL if member != "lstm_lm" else {k: v for k, v in SMALL.items() if not k.startswith(("heads", "ff"))}
    # fp64, so that the few-ulp differences between batch shapes can never flip an argmax
    return tfamily.build(getattr(members, member)(**sizes, **kw)).eval().double()


def _prompts(lengths=LENGTHS):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, V, (n,), generator=g) for n in lengths]


# Input positions (learned, sinusoidal, the UT's coordinates) need each row's own offset;
# rotary and relative-free attention depend on i - j, as does a sliding window.
CASES = {
    "gpt learned gqa": ("gpt", dict(position__max_len=64, heads__n_kv_heads=2)),
    "gpt sinusoidal": ("gpt", dict(position__name="sinusoidal")),
    "gpt rotary": ("gpt", dict(position__name="rotary")),
    "gpt sliding window": ("gpt", dict(pattern__name="sliding_window", pattern__params={"window": 4})),
    "universal_transformer_lm": ("universal_transformer_lm", {}),
}


@pytest.mark.parametrize("case, use_cache", [(c, True) for c in CASES] + [("gpt learned gqa", False)])
def test_batched_greedy_equals_each_prompt_alone(case, use_cache):
    member, kw = CASES[case]
    model, prompts = _model(member, **kw), _prompts()
    batched = generate(model, prompts, 8, greedy=True, use_cache=use_cache)
    for p, row in zip(prompts, batched):
        assert torch.equal(row, generate(model, p[None], 8, greedy=True)[0])


@pytest.mark.parametrize("case", ["gpt learned gqa", "gpt rotary"])
def test_batched_seeded_sampling_equals_each_prompt_alone(case):
    member, kw = CASES[case]
    model, prompts = _model(member, **kw), _prompts()
    gens = [torch.Generator().manual_seed(10 + r) for r in range(len(prompts))]
    batched = generate(model, prompts, 12, temperature=1.5, top_k=6, generator=gens)
    for r, (p, row) in enumerate(zip(prompts, batched)):
        alone = generate(model, p[None], 12, temperature=1.5, top_k=6, generator=torch.Generator().manual_seed(10 + r))
        assert torch.equal(row, alone[0])


def test_padded_logits_equal_the_rows_alone():
    model, prompts = _model("gpt", position__max_len=64), _prompts()
    ids, padding = left_pad(prompts)
    state = new_state(len(model.stack))
    state.pad_left((~padding).sum(1))
    logits = model(ids, state=state, key_padding=padding)
    assert torch.isfinite(logits).all()  # padding queries see no key and must not poison anything
    for r, p in enumerate(prompts):
        torch.testing.assert_close(logits[r, -len(p):], model(p[None])[0])


def test_stream_yields_each_step_as_generate_returns_it():
    model, prompts = _model("gpt", position__max_len=64), _prompts()
    ids, padding = left_pad(prompts)
    steps = list(stream(model, ids, 7, padding=padding, greedy=True))
    assert len(steps) == 7 and all(s.shape == (len(prompts),) for s in steps)
    assert torch.equal(torch.cat([ids, torch.stack(steps, 1)], 1), generate(model, ids, 7, padding=padding, greedy=True))


def test_stream_checks_arguments_at_the_call_and_restores_training_mode():
    model = _model("gpt", position__max_len=64).train()
    with pytest.raises(ValueError, match="temperature"):
        stream(model, torch.zeros(1, 2, dtype=torch.long), 3, temperature=0.0)
    steps = stream(model, torch.zeros(1, 2, dtype=torch.long), 3)
    next(steps)
    assert not model.training
    steps.close()
    assert model.training


@pytest.mark.parametrize("member, kw, words", [
    ("transformer_xl", {}, ["SegmentMemory", "one at a time"]),
    ("lstm_lm", {}, ["RNNState", "one at a time"]),
    ("reformer", {}, ["kernel 'lsh'", "one at a time"]),
    ("longformer", {}, ["pattern 'longformer'", "absolute position"]),  # global tokens, past its window
])
def test_states_and_patterns_that_padding_would_change_are_refused(member, kw, words):
    model = _model(member, **kw)
    with pytest.raises(ValueError) as e:
        generate(model, _prompts(), 40, greedy=True)  # refused before any step
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)
    same = generate(model, torch.stack(_prompts((3, 3))), 4, greedy=True)  # equal lengths need no padding
    assert same.shape == (2, 7)


@pytest.mark.parametrize("member, words", [("bert", ["attends both ways", "tfamily eval"]),
                                           ("vanilla", ["decoder-only", "beam_search"]),
                                           ("gpt_classifier", ["decoder-only", "tfamily eval"])])
def test_models_that_cannot_continue_text_are_refused(member, words):
    if member == "gpt_classifier":
        model = tfamily.build(members.gpt(**SMALL, model="classifier", objective__name="classification",
                                          objective__params={"n_classes": 3}))
    else:
        model = _model(member)
    with pytest.raises(ValueError) as e:
        generate(model, torch.zeros(1, 3, dtype=torch.long), 2)
    assert all(w in str(e.value) for w in words)


@pytest.mark.parametrize("kw, match", [
    (dict(padding=torch.tensor([[True, False, True]])), "left padding"),
    (dict(padding=torch.tensor([[False, False, False]])), "left padding"),
    (dict(padding=torch.ones(1, 2, dtype=torch.bool)), "shaped like the prompt"),
    (dict(generator=[torch.Generator()] * 2), "2 generators for 1 rows"),
])
def test_bad_padding_and_generators_name_the_fix(kw, match):
    with pytest.raises(ValueError, match=match):
        generate(_model("gpt", position__max_len=64), torch.zeros(1, 3, dtype=torch.long), 2, **kw)


def test_left_pad_aligns_rows_right():
    ids, padding = left_pad([torch.tensor([3, 4]), torch.tensor([5])], pad_id=0)
    assert ids.tolist() == [[3, 4], [0, 5]] and padding.tolist() == [[True, True], [False, True]]
    with pytest.raises(ValueError, match="non-empty list"):
        left_pad([])


def test_cache_keeps_row_positions_through_reorder_and_state_dict():
    state = new_state(2)
    state.pad_left(torch.tensor([2, 0, 1]))
    assert state.offset.tolist() == [-2, 0, -1]
    state.reorder(torch.tensor([2, 0]))
    assert state.offset.tolist() == [-1, -2]
    other = new_state(2)
    other.load_state_dict(state.state_dict())
    assert other.offset.tolist() == [-1, -2]
    state.reset()
    assert state.offset == 0
