"""The one number checker: types, bounds, NaN/inf, bool and the message's parts."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tfamily.base.numbers import check_flag, check_int, check_number, check_prob


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_int_accepts_integers_and_returns_int(value):
    out = check_int("n", value, 1)
    assert out == int(value) and type(out) is int


@pytest.mark.parametrize("value,kind", [(True, TypeError), (1.0, TypeError), ("3", TypeError), (0, ValueError),
                                        (11, ValueError), (None, TypeError)])
def test_int_refuses_with_name_value_rule_and_hint(value, kind):
    with pytest.raises(kind) as e:
        check_int("model.n_layers", value, 1, 10, hint="the paper uses 6")
    msg = str(e.value)
    assert msg.startswith("model.n_layers must be an integer in [1, 10]") and repr(value) in msg
    assert msg.endswith("; the paper uses 6") and "\n" not in msg


def test_int_none_only_when_allowed():
    assert check_int("mem_len", None, 0, none=True) is None
    with pytest.raises(ValueError, match=r"mem_len must be an integer >= 0 or null, got -1"):
        check_int("mem_len", -1, 0, none=True)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_number_refuses_non_finite(value):
    with pytest.raises(ValueError, match="lr must be a finite number > 0.0"):
        check_number("lr", value, 0.0, lo_open=True)


def test_number_bounds_open_and_closed():
    assert check_number("p", 0.0, 0.0, 1.0) == 0.0
    with pytest.raises(ValueError, match=r"in \(0.0, 1.0\)"):
        check_number("p", 0.0, 0.0, 1.0, lo_open=True, hi_open=True)
    with pytest.raises(TypeError, match="got True"):
        check_number("p", True, 0.0)
    assert check_number("w", 3, 0.0) == 3.0


def test_prob_is_half_open():
    assert check_prob("dropout", 0.0) == 0.0
    with pytest.raises(ValueError, match=r"dropout must be a finite number in \[0.0, 1.0\), got 1.0"):
        check_prob("dropout", 1.0)


@pytest.mark.parametrize("value", [0, 1, "yes", None])
def test_flag_is_only_a_bool(value):
    with pytest.raises(TypeError, match="same_length must be true or false"):
        check_flag("same_length", value)
    assert check_flag("same_length", False) is False
