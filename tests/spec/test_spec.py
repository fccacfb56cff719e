"""Specs: JSON round trips, the three override spellings, and one test per
validation error, each checking that the message names the offending value."""
from __future__ import annotations

import json

import pytest

from tfamily import Spec, members
from tfamily.registry import RESIDUALS
from tfamily.spec import HeadsSpec, PatternSpec


@pytest.mark.parametrize("name", sorted(members.REGISTRY))
def test_round_trip_through_json(name):
    spec = members.get(name)(heads__n_kv_heads=None)
    d = json.loads(json.dumps(spec.to_dict()))
    assert Spec.from_dict(d) == spec
    assert Spec.from_dict(d).to_dict() == d


def test_round_trip_keeps_per_layer_patterns_and_params():
    spec = members.bert(pattern=dict(per_layer=[{"name": "full"}, {"name": "causal"}]),
                        objective__params={"mask_prob": 0.2})
    back = Spec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec
    assert back.pattern.per_layer == (PatternSpec("full"), PatternSpec("causal"))
    assert back.pattern.for_layer(3).name == "causal"
    assert back.choices()["pattern"] == "full+causal"


def test_replace_axis_field_dict_partial_and_dotted_override():
    spec = members.gpt()
    a = spec.replace(heads__n_kv_heads=4, d_model=384)
    assert a.heads == HeadsSpec(n_heads=12, n_kv_heads=4) and a.d_model == 384
    b = spec.replace(heads=dict(n_kv_heads=4))  # a partial dict keeps the other fields
    assert b.heads.n_heads == 12 and b.heads.n_kv_heads == 4
    c = spec.override({"heads.n_kv_heads": 4, "ff.activation": "relu"})
    assert c.heads == b.heads and c.ff.activation == "relu" and c.ff.d_ff == spec.ff.d_ff
    assert spec.heads.n_kv_heads is None  # specs are frozen: the original is unchanged
    assert members.gpt(heads__n_kv_heads=4) == a.replace(d_model=768)
    assert a.choices()["heads"] == "grouped-query"
    assert spec.replace(heads__n_kv_heads=1).choices()["heads"] == "multi-query"


def test_derived_sizes():
    spec = members.gpt(d_model=64, heads__n_heads=4)
    assert spec.d_head == 16 and spec.d_ff == 256
    assert spec.replace(heads__d_head=8, ff__d_ff=100).d_head == 8
    # d_head lets n_heads not divide d_model.
    assert members.gpt(d_model=60, heads=dict(n_heads=8, d_head=8)).d_head == 8


def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match="d_model=100 is not divisible by n_heads=12"):
        members.gpt(d_model=100)


def test_n_heads_not_divisible_by_n_kv_heads():
    with pytest.raises(ValueError, match=r"n_heads=12 is not divisible by n_kv_heads=5.*\[1, 2, 3, 4, 6, 12\]"):
        members.gpt(heads__n_kv_heads=5)


def test_unknown_choice_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown pattern 'diagonal'; valid choices: .*causal.*full"):
        members.gpt(pattern__name="diagonal")
    with pytest.raises(ValueError, match=r"unknown kernel 'fast'.*reference.*sdpa"):
        members.gpt(kernel={"name": "fast"})
    with pytest.raises(ValueError, match=r"unknown activation 'tanh'.*gelu.*relu"):
        members.gpt(ff__activation="tanh")
    with pytest.raises(TypeError, match="pattern must be a string.*3"):
        PatternSpec(name=3)


def test_unknown_override_key_lists_valid_keys():
    with pytest.raises(ValueError, match=r"unknown spec key 'dmodel'; valid keys: .*d_model"):
        members.gpt(dmodel=64)
    with pytest.raises(ValueError, match=r"unknown spec key 'heads.n_head'; valid keys: .*heads.n_heads"):
        members.gpt(heads__n_head=4)
    with pytest.raises(ValueError, match=r"unknown spec key 'd_model.x'"):
        members.gpt().override({"d_model.x": 1})
    with pytest.raises(ValueError, match=r"unknown heads keys \['n_head'\].*n_heads"):
        members.gpt(heads=dict(n_head=4))
    with pytest.raises(ValueError, match=r"unknown spec keys \['colour'\]"):
        Spec.from_dict({"member": "x", "colour": "red"})


def test_objective_not_fitting_model():
    with pytest.raises(ValueError, match=r"objective 'masked_lm' does not fit model 'decoder'.*causal_lm"):
        members.gpt(objective__name="masked_lm")


@pytest.mark.parametrize("override, error, match", [
    (dict(heads__n_heads=0), ValueError, "heads.n_heads must be an integer >= 1, got 0"),
    (dict(heads__n_heads="8"), TypeError, "heads.n_heads must be an integer >= 1, got '8'"),
    (dict(depth__n_layers=True), TypeError, "depth.n_layers must be an integer >= 1, got True"),
    (dict(vocab_size=1), ValueError, "vocab_size must be an integer >= 2, got 1"),
    (dict(dropout=1.0), ValueError, r"dropout must be a finite number in \[0.0, 1.0\), got 1.0"),
    (dict(attn_dropout=-0.1), ValueError, "attn_dropout must be a finite number in .* or null, got -0.1; null follows dropout"),
    (dict(position__max_len=0), ValueError, "position.max_len must be an integer >= 1, got 0"),
    (dict(model="rnn"), ValueError, "unknown model 'rnn'"),
    (dict(heads=[8]), TypeError, "heads must be a HeadsSpec or dict, got list"),
])
def test_field_checks_name_the_value(override, error, match):
    with pytest.raises(error, match=match):
        members.gpt(**override)


def test_choices_cover_every_axis():
    spec = members.vanilla()
    assert set(spec.choices()) == {"pattern", "kernel", "position", "heads", "residual", "depth", "state",
                                   "feed_forward", "objective", "init", "dropout"}
    assert spec.choices()["residual"] in RESIDUALS
    assert spec.choices()["dropout"] == "0.1 on embedding, sublayer outputs"  # Vaswani et al., section 5.4
    assert members.gpt(dropout=0.0).choices()["dropout"] == "none"
