"""Configs: YAML and TOML files, dotted key=value overrides, validation messages."""
from __future__ import annotations

import pytest

from tfamily.train import config
from tfamily.train.config import Config, load, parse_duration, parse_overrides


def test_durations():
    assert parse_duration("5m") == 300.0
    assert parse_duration("90s") == parse_duration("90") == parse_duration(90) == 90.0
    assert parse_duration("1.5h") == 5400.0
    assert parse_duration(None) is None
    for bad in ("5 minutes", "-3", "0", "m"):
        with pytest.raises(ValueError, match="duration|positive"):
            parse_duration(bad, "train.time_budget")


def test_override_values_are_typed():
    o = parse_overrides(["train.lr=3e-3", "model.depth.n_layers=4", "train.compile=true", "train.betas=[0.9, 0.99]",
                         "data.corpus=kjv", "train.eval_every=null"])
    assert o == {"train.lr": 0.003, "model.depth.n_layers": 4, "train.compile": True, "train.betas": [0.9, 0.99],
                 "data.corpus": "kjv", "train.eval_every": None}


@pytest.mark.parametrize("item, match", [("lr=3", "must start with one of"), ("train.lr", "not key=value"),
                                          ("=3", "not key=value")])
def test_bad_override_syntax_names_the_fix(item, match):
    with pytest.raises(ValueError, match=match):
        parse_overrides([item])


def test_yaml_and_toml_files_give_the_same_config(tmp_path):
    (tmp_path / "a.yaml").write_text("member: gpt\nmodel:\n  d_model: 64\n  depth: {n_layers: 2}\n"
                                     "data: {corpus: kjv, seq_len: 64}\ntrain: {lr: 2.0e-3, max_steps: 10}\n")
    (tmp_path / "a.toml").write_text('member = "gpt"\n[model]\nd_model = 64\n[model.depth]\nn_layers = 2\n'
                                     '[data]\ncorpus = "kjv"\nseq_len = 64\n[train]\nlr = 2e-3\nmax_steps = 10\n')
    a, b = load(tmp_path / "a.yaml"), load(tmp_path / "a.toml")
    assert a.to_dict() == b.to_dict()
    assert a.model == {"d_model": 64, "depth": {"n_layers": 2}} and a.train.lr == 2e-3 and a.data.corpus == "kjv"
    c = load(tmp_path / "a.yaml", ["model.depth.n_layers=3", "model.heads.n_kv_heads=2", "train.lr=1e-3"])
    assert c.model == {"d_model": 64, "depth": {"n_layers": 3}, "heads": {"n_kv_heads": 2}} and c.train.lr == 1e-3


def test_packaged_configs_all_load():
    names = sorted(p.stem for p in config.PACKAGE_CONFIGS.iterdir() if p.suffix in (".yaml", ".toml"))
    assert "demo" in names
    for name in names:
        cfg = load(name)
        assert isinstance(cfg, Config)


def test_missing_config_lists_the_available_ones():
    with pytest.raises(FileNotFoundError, match="available configs: .*demo"):
        load("no-such-config")


@pytest.mark.parametrize("overrides, match", [
    ({"train.precision": "fp8"}, r"train.precision='fp8' is not valid; valid: auto, bf16, fp16, fp32"),
    ({"train.lr_decay": 1}, r"unknown train key\(s\) \['lr_decay'\]; valid: batch_size"),
    ({"training.lr": 1}, "unknown config section"),
    ({"train.batch_size": 0}, "train.batch_size must be an integer >= 1"),
    ({"train.max_steps": None}, "set train.max_steps or train.time_budget"),
    ({"data.task": "copy"}, "exactly one of data.corpus"),
    ({"data.vocab": "word"}, "data.vocab='word' is not valid; valid: byte, char"),
    ({"train.time_budget": "soon"}, "train.time_budget='soon' is not a duration"),
    ({"train.betas": [0.9]}, "train.betas must be two numbers"),
    ({"train.device": "tpu"}, "train.device='tpu' is not valid"),
    ({"train.optimizer": "sgd"}, "train.optimizer='sgd' is not valid; valid: adamw, muon"),
])
def test_invalid_settings_name_the_option_and_valid_values(overrides, match):
    with pytest.raises(ValueError, match=match):
        load(None, overrides)


def test_a_time_budget_alone_is_not_capped_at_the_default_steps():
    """`--time 5m` with no step count trains for five minutes: the 1,000-step default is for a run
    given no budget (before, a 5-minute run of a small member stopped at step 1,000 after a minute,
    so the README's equal-time comparison was an equal-steps one)."""
    assert load(overrides={"data.corpus": "tinyshakespeare"}).train.max_steps == 1000
    timed = load(overrides={"data.corpus": "tinyshakespeare", "train.time_budget": "5m"})
    assert timed.train.max_steps is None and timed.train.time_budget == "5m"
    both = load(overrides={"data.corpus": "tinyshakespeare", "train.time_budget": "5m", "train.max_steps": 300})
    assert both.train.max_steps == 300
