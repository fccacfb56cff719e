"""Command-line flags of `tfamily train` and `tfamily demo` as dotted config overrides
(shared by both commands, so neither imports the other)."""
from __future__ import annotations

from typing import Any

from .config import parse_overrides

# flag -> dotted key
FLAGS = (("member", "member"), ("size", "size"), ("steps", "train.max_steps"), ("time", "train.time_budget"),
         ("out", "train.out"), ("precision", "train.precision"), ("device", "train.device"), ("seed", "train.seed"),
         ("init_from", "train.init_from"))


def flag_overrides(args) -> dict[str, Any]:
    """An argparse namespace's ``key=value`` list and flags as dotted overrides."""
    o = parse_overrides(args.overrides)
    for flag, key in FLAGS:
        if getattr(args, flag, None) is not None:
            o[key] = getattr(args, flag)
    if getattr(args, "compile", False):
        o["train.compile"] = True
    if getattr(args, "activation_checkpointing", False):
        o["train.activation_checkpointing"] = True
    return o
