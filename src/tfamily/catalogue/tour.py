"""A reading tour of one member: for each axis, the classes that implement its choice
and the paper's equation or section (``tfamily members NAME``).

The classes are read from the member as built (on the meta device, so nothing is
allocated), never from a second list of which class serves which choice, and each class
names its own source (``citation``, the ``Cited`` Protocol), so a new part appears in the
tour with its citation and no edit here. Only torch's own classes (dropout, the RNN cells)
are a table here; a class without a citation falls back to the first line of its docstring
that cites a year.
"""
from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
from torch import nn

from ..models import EncoderDecoder, LanguageModel, MLMHead
from ..models.rnn_encdec import RNNEncoderDecoder
from ..nn.attention import Attention
from ..nn.block import Block
from ..nn.depth import RecurrentStack
from ..nn.feedforward import Chunked
from ..nn.patterns.adaptive_span import SoftPatternKernel
from ..nn.patterns.combine import Intersect, PerHead, Union
from ..nn.position import NoPosition
from ..nn.position.coordinate import Coordinate
from ..spec import Spec


class Cited(Protocol):
    """A part that names its source: ``citation`` is the paper and the equation or section it implements,
    declared on the class beside its code (a new part brings its own; the tour never needs an edit)."""

    citation: ClassVar[str]


# The classes tfamily takes from torch.nn as they are, so they cannot declare a citation themselves.
CITATIONS: dict[str, str] = {
    "Dropout": "Srivastava et al. 2014; where it acts is the member's paper's choice (Vaswani et al. "
               "2017, section 5.4: sublayer outputs and embedding sums)",
    "RNN": "Elman 1990: h_t = tanh(W_ih x_t + W_hh h_{t-1} + b)",
    "LSTM": "Hochreiter & Schmidhuber 1997 (forget gate: Gers et al. 2000): c_t = f c_{t-1} + i g, h_t = o tanh(c_t)",
    "GRU": "Cho et al. 2014, eq. 5-8: reset and update gates, h_t = (1 - z) n + z h_{t-1}",
}

_YEAR = re.compile(r"\b(19|20)\d\d\b")


@dataclass(frozen=True)
class Stop:
    """One line of the tour: an axis, the spec's choice on it, a class implementing it."""
    axis: str
    choice: str
    cls: type
    citation: str

    @property
    def where(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}"


def cite(cls: type, around: Mapping[str, str] | None = None) -> str:
    """The citation of ``cls``: what the model's stack says of it (``around``: a part that gives shared
    classes other equations declares ``cites_around``, as ``RecurrentStack`` does), else its own
    (``Cited``), else torch's table, else the first line of its class or module docstring that cites a year."""
    if around and cls.__qualname__ in around:
        return around[cls.__qualname__]
    own = vars(cls).get("citation")  # declared on the class itself, never inherited from a base
    if isinstance(own, str):
        return own
    if cls.__module__.startswith("torch.") and cls.__qualname__ in CITATIONS:
        return CITATIONS[cls.__qualname__]
    for doc in (cls.__doc__, inspect.getmodule(cls).__doc__):
        for line in (doc or "").splitlines():
            if _YEAR.search(line):
                return line.strip()
    return "(no citation: give the class a citation attribute, see tfamily.catalogue.tour.Cited)"


def cites_itself(cls: type) -> bool:
    """Whether ``cls`` declares its citation (``Cited``) or is a torch class of ``CITATIONS``."""
    return isinstance(vars(cls).get("citation"), str) or (cls.__module__.startswith("torch.")
                                                           and cls.__qualname__ in CITATIONS)


def _leaves(pattern) -> list:
    """A pattern and, for a combinator, its parts (depth first)."""
    out = [pattern]
    if isinstance(pattern, (Union, Intersect, PerHead)):
        for part in pattern.patterns:
            out += _leaves(part)
    return out


class NotUsed:
    """An axis the member has no part on (a recurrent model has no attention pattern, kernel,
    heads, residual or feed-forward)."""
    citation = ("Elman 1990; Hochreiter & Schmidhuber 1997: a recurrent model carries everything between "
                "positions in its state, so it has no part on this attention axis")


def _recurrent_parts(model: nn.Module) -> dict[str, list]:
    unused = [NotUsed()]
    if isinstance(model, RNNEncoderDecoder):
        score = [model.decoder.score] if model.decoder.score is not None else []
        depth, position = [model.encoder, model.decoder, model.decoder.rnn, *score], unused
    else:
        depth = [model.stack, model.stack.rnn]
        position = unused if isinstance(model.position, NoPosition) else [model.position]
    return {"model": [model], "embedding": [model.embed, model.head], "position": position, "pattern": unused,
            "kernel": unused, "heads": unused, "residual": unused, "depth": depth, "state": [model.new_state()],
            "feed_forward": unused, "objective": [model.objective]}


def _parts(model: nn.Module) -> dict[str, list]:
    """axis -> the objects implementing it in ``model``, in reading order. Layers are found
    by type anywhere below the model, so any depth (a stack, a shared block) is read alike."""
    recurrent_lm = isinstance(model, LanguageModel) and isinstance(model.stack, RecurrentStack)
    if recurrent_lm or isinstance(model, RNNEncoderDecoder):
        return _recurrent_parts(model)
    stacks = [model.encoder, model.decoder] if isinstance(model, EncoderDecoder) else [model.stack]
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    attns = [m for m in model.modules() if isinstance(m, Attention)]
    head = [model.head, model.head.out] if isinstance(model.head, MLMHead) else [model.head]
    return {
        "model": [model], "embedding": [model.embed, *head],
        "position": [model.position, *(m for m in model.modules() if isinstance(m, Coordinate)),
                     *(a.position for a in attns if a.position is not None)],
        "pattern": [leaf for a in attns for leaf in _leaves(a.pattern)],
        "kernel": [k for a in attns for k in ([a.kernel, a.kernel.inner] if isinstance(a.kernel, SoftPatternKernel)
                                               else [a.kernel])],
        "heads": [a.proj for a in attns],
        "residual": [b.attn_residual for b in blocks],
        "depth": stacks,
        "state": [model.new_state()],
        "feed_forward": [f for b in blocks for f in ([b.ff, b.ff.inner] if isinstance(b.ff, Chunked) else [b.ff])],
        "objective": [model.objective],
    }


def tour(member: str | Spec) -> list[Stop]:
    """A member (by name, or any spec) as built, axis by axis, each class once per axis."""
    from .. import members
    from ..build import build, init_scheme
    spec = members.get(member)() if isinstance(member, str) else member
    with torch.device("meta"):
        model = build(spec)
    embedding = ("tied" if spec.tie_embeddings else "untied") + (
        ", x sqrt(d_model)" if spec.scale_embeddings else ", unscaled") + (
        ", learned logit scale" if spec.logit_scale and spec.tie_embeddings else "")
    choices = {"model": spec.model, "embedding": embedding, **spec.choices()}
    parts = {**_parts(model), "init": [init_scheme(spec)], "dropout": [nn.Dropout()]}
    around = getattr(getattr(model, "stack", None), "cites_around", None)
    stops = []
    for axis, objs in parts.items():
        for cls in dict.fromkeys(type(o) for o in objs):
            stops.append(Stop(axis, str(choices[axis]), cls, cite(cls, around)))
    return stops


def render(name: str) -> str:
    """The tour as text: a line per axis (its choice), then a line per class and its citation."""
    from .. import members
    lines, last = [f"{name}: {members.REGISTRY[name].paper}"], None
    for s in tour(name):
        if s.axis != last:
            lines.append(f"  {s.axis} = {_short(s.choice)}")
            last = s.axis
        lines.append(f"      {s.where}: {s.citation}")
    m = members.REGISTRY[name]
    if m.base is not None:
        lines.append(f"  changes from the {m.base} base (tfamily.members.recipes), each from the paper:"
                     if m.changes else f"  the {m.base} base itself (tfamily.members.recipes)")
        lines += [f"    {c.key} = {_value(c.value)}{' [attention]' if c.attention else ''}: {c.source}"
                  for c in m.changes]
    return "\n".join(lines)


def _value(v) -> str:
    if isinstance(v, dict) and "per_layer" in v:
        return f"{v['name']} x{len(v['per_layer'])} layers"
    return str(v)


def _short(choice: str) -> str:
    # Longformer's per-layer pattern names repeat once per layer.
    parts = choice.split("+")
    return f"{parts[0]} (x{len(parts)} layers)" if len(parts) > 1 and len(set(parts)) == 1 else choice
