"""The one checker for numbers and flags that come from users (specs, configs, CLI flags, part
constructors). Every part validates its own arguments where they are used; this module only makes
the rule and the message the same everywhere:

    "<name> must be an integer >= 1, got 'abc'; <hint>"

A wrong type raises ``TypeError``, a value out of range ``ValueError``; both name the value and,
through ``hint``, the fix or the paper's value. ``bool`` is never a number here (``True`` is an
``int`` in Python, and ``n_layers=True`` is a mistake, not 1), and NaN and the infinities are
refused unless a bound is open to them (an inf learning rate only shows up later as a non-finite
loss). Imports nothing from tfamily, so every layer may use it.
"""
from __future__ import annotations

import math
import numbers
from typing import Any


SHOWN = 80  # characters of a value quoted in an error line


def cut(value: Any, n: int = SHOWN) -> str:
    """``repr(value)`` cut to about ``n`` characters, so an error line quoting a huge value (a
    10^6-element list from a config file) stays one readable line."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > n:  # its whole repr would be huge
        return f"<a {type(value).__name__} of {len(value)} items>"
    r = repr(value)
    return r if len(r) <= n else f"{r[:n - 20]}...{r[-12:]} ({len(r)} chars)"


def _suffix(hint: str) -> str:
    return f"; {hint}" if hint else ""


def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _range(lo, hi, lo_open: bool = False, hi_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {hi}"
    return ""


def check_int(name: str, value: Any, lo: int | None = 1, hi: int | None = None, *, none: bool = False,
              hint: str = "") -> int | None:
    """``value`` as an ``int`` if it is an integer in [lo, hi] (``None`` for no bound), or ``None``
    when ``none`` allows it; else a one-line error naming ``name`` and ``value``."""
    if value is None and none:
        return None
    rule = " ".join(w for w in ("an integer", _range(lo, hi), "or null" if none else "") if w)
    if not _integer(value):
        raise TypeError(f"{name} must be {rule}, got {cut(value)}{_suffix(hint)}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be {rule}, got {cut(value)}{_suffix(hint)}")
    return int(value)


def check_number(name: str, value: Any, lo: float | None = None, hi: float | None = None, *,
                 lo_open: bool = False, hi_open: bool = False, none: bool = False, hint: str = "") -> float | None:
    """``value`` as a ``float`` if it is a finite real number within the bounds (``lo_open`` /
    ``hi_open`` exclude the bound itself), or ``None`` when ``none`` allows it."""
    if value is None and none:
        return None
    rule = " ".join(w for w in ("a finite number", _range(lo, hi, lo_open, hi_open), "or null" if none else "")
                    if w)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {rule}, got {cut(value)}{_suffix(hint)}")
    v = float(value)
    below = lo is not None and (v <= lo if lo_open else v < lo)
    above = hi is not None and (v >= hi if hi_open else v > hi)
    if not math.isfinite(v) or below or above:
        raise ValueError(f"{name} must be {rule}, got {cut(value)}{_suffix(hint)}")
    return v


def check_prob(name: str, value: Any, *, none: bool = False, hint: str = "") -> float | None:
    """A dropout-style rate in [0, 1)."""
    return check_number(name, value, 0.0, 1.0, hi_open=True, none=none, hint=hint)


def check_flag(name: str, value: Any, *, hint: str = "") -> bool:
    """``True`` or ``False`` and nothing else (not 0/1, not "yes")."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be true or false, got {cut(value)}{_suffix(hint)}")
    return value
