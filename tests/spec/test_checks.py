"""Spec checks that need parts: unknown ``params`` keys are refused on every axis with the
valid keys named (issue 13: they were silently accepted on position, state, ff, depth and
objective), and bad values of kernel and pattern parameters are refused on construction."""
from __future__ import annotations

import pytest

from tfamily import members


@pytest.mark.parametrize("axis,name,valid", [
    ("position", "sinusoidal", "none"), ("position", "relative", "clamp_len, same_length"),
    ("state", "xl_memory", "none"), ("state", "kv_cache", "none"), ("ff", "mlp", "none"),
    ("ff", "sepconv", "kernel_size"),
    ("depth", "stack", "none"), ("depth", "reversible", "none"),
])
def test_unknown_params_are_refused_naming_the_valid_keys(axis, name, valid):
    over = {axis: {"name": name, "params": {"bogus": 1}}}
    if name == "reversible":
        over["residual"] = {"name": "pre_norm"}
    with pytest.raises(ValueError, match=rf"unknown {axis}.params \['bogus'\] for {axis} '{name}'; "
                                         rf"valid keys: {valid}"):
        members.gpt(**over)


def test_objective_params():
    with pytest.raises(ValueError, match=r"unknown objective.params \['foo'\] for objective 'causal_lm'; "
                                         r"valid keys: none"):
        members.gpt(objective__params={"foo": 1})
    with pytest.raises(ValueError, match=r"\['mask_rate'\] for objective 'masked_lm'; valid keys: mask_id, mask_prob"):
        members.bert(objective__params={"mask_rate": 0.2})
    assert members.bert(objective__params={"mask_prob": 0.2}).objective.params == {"mask_prob": 0.2}


def test_kernel_and_pattern_params_list_the_valid_keys():
    with pytest.raises(ValueError, match=r"\['block'\] for kernel 'blocksparse'; valid keys: block_size"):
        members.gpt(kernel={"name": "blocksparse", "params": {"block": 64}})
    with pytest.raises(ValueError, match=r"\['widow'\] for pattern 'sliding_window'; valid keys: window, causal"):
        members.gpt(pattern={"name": "sliding_window", "params": {"widow": 64}})
    with pytest.raises(ValueError, match=r"\['spans'\] for pattern 'adaptive_span'; valid keys: max_span, ramp"):
        members.gpt(pattern={"name": "adaptive_span", "params": {"max_span": 8, "spans": 1}})
    # Nested sub-specs and per-layer patterns are checked too, values as well as keys.
    with pytest.raises(ValueError, match=r"\['widow'\] for pattern 'sliding_window'"):
        members.gpt(pattern={"name": "union", "params": {"patterns": [
            {"name": "causal"}, {"name": "sliding_window", "params": {"widow": 2}}]}})
    with pytest.raises(ValueError, match="window must be an integer >= 1, got 0"):
        members.gpt(pattern={"per_layer": [{"name": "causal"}, {"name": "sliding_window", "params": {"window": 0}}]})


def test_per_layer_must_be_a_list_of_pattern_specs():
    with pytest.raises(TypeError, match="per_layer must be a list of pattern specs"):
        members.gpt(pattern={"per_layer": "causal"})
    with pytest.raises(TypeError, match="per_layer entries must be dicts"):
        members.gpt(pattern={"per_layer": ["causal"]})


def test_lsh_needs_shared_qk_and_checks_its_params():
    with pytest.raises(ValueError, match="kernel 'lsh' needs heads.shared_qk=True"):
        members.gpt(kernel={"name": "lsh"})
    with pytest.raises(ValueError, match=r"\['n_hash'\] for kernel 'lsh'; valid keys: .*n_hashes"):
        members.reformer(kernel={"name": "lsh", "params": {"n_hash": 2}})


def test_sepconv_refuses_chunks_and_xl_memory_naming_the_fix():
    assert members.gpt(ff={"name": "sepconv", "params": {"kernel_size": 5}}).ff.name == "sepconv"
    with pytest.raises(ValueError, match=r"ff 'sepconv' with ff.chunks=2: .*window.*set ff.chunks=1"):
        members.gpt(ff={"name": "sepconv", "chunks": 2})
    with pytest.raises(ValueError, match=r"ff 'sepconv' with state 'xl_memory': .*use ff 'mlp'"):
        members.transformer_xl(ff={"name": "sepconv"})
    members.reformer(ff={"name": "mlp"})  # chunked and position-wise: still fine
