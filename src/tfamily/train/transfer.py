"""Start a model from another's weights: with any axis changed. A checkpoint is a member plus
weights, so changing an axis is a spec override, and every weight the new spec still has, at the
same shape, is copied; what the new spec adds starts from its own initialisation and is named, as
is what it leaves out.

- A pattern (sliding window, BigBird), a state (XL memory), a kernel or a depth without weights
  of its own changes which keys a query sees, not the weights: all of them are kept.
- A longer learned position table is filled the Longformer way (Beltagy et al. 2020, section 5:
  "we initialize them by copying the 512 position embeddings from RoBERTa multiple times"): row
  i is the source's row i mod n, so each copy starts where the attention learned to expect
  position 0's neighbours, and the model reads the longer context at once.
- A new model kind (a classifier on a decoder or encoder) keeps the trunk; the old head is
  dropped and the new one starts fresh.

Where the source comes from (a Hugging Face directory, a tfamily run or checkpoint) is a reader
registered in ``registry.SOURCES`` (``pretrained/transfer.py``), so the trainer never imports the
importers built above it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..spec import Spec

POSITION_TABLE = "position.table.weight"


class Source(NamedTuple):
    """A checkpoint to start from: its model (weights loaded, LoRA merged), spec and vocabulary."""
    model: nn.Module
    spec: Spec
    vocab: object | None
    path: Path


class Report(NamedTuple):
    """What ``transfer`` did, by weight name: copied as is, filled from a shorter table, new
    (absent from the source, or at another shape), and the source's weights left out."""
    kept: list[str]
    extended: list[str]
    new: list[str]
    dropped: list[str]

    def lines(self) -> list[str]:
        out = [f"{len(self.kept)} weights kept"]
        out += [f"extended {e}" for e in self.extended]
        out.append(f"new: {_short(self.new)}" if self.new else "new: none")
        out.append(f"dropped: {_short(self.dropped)}" if self.dropped else "dropped: none")
        return out


def _short(names: list[str]) -> str:
    """``stack.blocks.0.x, stack.blocks.1.x`` -> ``stack.blocks.*.x (2)``: one entry per layer pattern."""
    groups: dict[str, int] = {}
    for n in names:
        key = re.sub(r"\.blocks\.\d+\.", ".blocks.*.", n)
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(k if c == 1 else f"{k} (x{c})" for k, c in groups.items())


def tied(model: nn.Module) -> set[str]:
    """The state names that alias an earlier one (a head tied to the embedding)."""
    seen: set[int] = set()
    aliases = set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:
            aliases.add(name)
        seen.add(id(t))
    return aliases


def _own(model: nn.Module) -> dict[str, Tensor]:
    aliases = tied(model)
    return {k: v for k, v in model.state_dict().items() if k not in aliases}


def longformer_fill(table: Tensor, rows: int) -> Tensor:
    """``table`` (n, d) repeated to ``rows`` rows: row i is row i mod n."""
    return table[torch.arange(rows, device=table.device) % table.shape[0]]


def transfer(source: nn.Module, model: nn.Module, *, keep_head: bool = True) -> Report:
    """Copy into ``model`` every weight of ``source`` it still has at the same shape, a longer
    learned position table filled the Longformer way; ``keep_head=False`` leaves ``head.*`` new
    (the model kind changed, so the old head means something else)."""
    src, own = _own(source), _own(model)
    kept, extended, new = [], [], []
    with torch.no_grad():
        for name, t in own.items():
            s = src.get(name) if keep_head or not name.startswith("head.") else None
            if s is not None and s.shape == t.shape:
                t.copy_(s)
                kept.append(name)
            elif (s is not None and name.endswith(POSITION_TABLE) and s.dim() == 2 and s.shape[1] == t.shape[1]
                  and s.shape[0] < t.shape[0]):
                t.copy_(longformer_fill(s, t.shape[0]))
                times = t.shape[0] / s.shape[0]
                extended.append(f"{name} {s.shape[0]} -> {t.shape[0]} rows (the table copied {times:g} times, as "
                                f"Longformer extends RoBERTa's)")
            else:
                new.append(name if s is None else f"{name} (was {tuple(s.shape)}, now {tuple(t.shape)})")
    done = set(kept) | {e.split(" ")[0] for e in extended}
    dropped = [n for n in src if n not in done and not (n in own and src[n].shape != own[n].shape)]
    return Report(kept, extended, new, dropped)
