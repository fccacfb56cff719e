"""The one nested-dict merge: mappings recurse, anything else is replaced, inputs stay as they were."""
from __future__ import annotations

from tfamily.base.dicts import deep_merge


def test_mappings_merge_and_other_values_are_replaced():
    base = {"a": 1, "b": {"c": 1, "d": [1, 2]}, "e": {"f": 1}}
    update = {"b": {"d": [3], "g": None}, "e": 5, "h": {"i": 2}}
    assert deep_merge(base, update) == {"a": 1, "b": {"c": 1, "d": [3], "g": None}, "e": 5, "h": {"i": 2}}


def test_later_dicts_win_and_keys_keep_their_first_order():
    out = deep_merge({"x": 1, "y": {"z": 1}}, {"y": {"z": 2}, "w": 0}, {"x": 3})
    assert out == {"x": 3, "y": {"z": 2}, "w": 0} and list(out) == ["x", "y", "w"]


def test_the_result_shares_nothing_with_its_inputs():
    base, update = {"a": {"b": [1]}}, {"c": {"d": [2]}}
    out = deep_merge(base, update)
    out["a"]["b"].append(9)
    out["c"]["d"].append(9)
    assert base == {"a": {"b": [1]}} and update == {"c": {"d": [2]}}


def test_a_mapping_replaces_a_plain_value_and_the_reverse():
    assert deep_merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert deep_merge({"a": {"b": 2}}, {"a": None}) == {"a": None}
    assert deep_merge() == {}
