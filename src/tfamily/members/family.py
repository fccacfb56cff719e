"""The family's registry: how a member is composed from its model kind's base recipe
(``members/recipes.py``), its paper's sizes and its paper's changes, and how two members are compared.
The members themselves are declared in ``members/__init__.py``."""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .recipes import Change, base
from ..registry import MEMBERS
from ..spec import Spec, merge, set_key


def follow_depth(per_layer: list, n_layers: int) -> list:
    """A member's own per-layer list at ``n_layers`` layers, resampled from its first entry to its
    last (layer i of n takes entry i (m - 1) / (n - 1) of m, rounded half up), so a list that grows with depth
    (Longformer's windows) still ends at its largest; one layer takes the first entry."""
    m = len(per_layer)
    if m in (0, n_layers):
        return list(per_layer)
    if n_layers == 1:
        return [per_layer[0]]
    return [per_layer[int(i * (m - 1) / (n_layers - 1) + 0.5)] for i in range(n_layers)]


@dataclass(frozen=True)
class Member:
    name: str
    paper: str
    make: Callable[..., Spec]
    at_context: Callable[[dict, int], dict] | None = None  # (preset dict, seq_len) -> overrides
    base: str | None = None                 # the model kind whose recipe it starts from (None: not a Transformer)
    sizes: dict = field(default_factory=dict)
    changes: tuple[Change, ...] = ()
    preset: dict = field(default_factory=dict)  # the spec dict: base, sizes, changes

    def dense(self) -> dict:
        """The overrides (nested, as a config's ``model``) that give this member the base's attention:
        each attention change's key set back to the base's choice."""
        out: dict = {}
        for c in self.changes:
            if c.attention:
                head, _, rest = c.key.partition(".")
                b = base(self.base)
                out.setdefault(head, {}).update(
                    {rest: b[head].get(rest, False)} if rest else {"name": b[head]["name"]})
        return out

    def attention_only(self) -> dict:
        """The overrides (nested, as a config's ``model``) that set each of this member's changes other
        than attention back to the base's: the member's attention on the base recipe, what a controlled
        comparison trains (LRA's protocol). The vocabulary stays the data's."""
        b = Spec.from_dict({"member": "base", **base(self.base)}).to_dict() if self.base else {}
        out: dict = {}
        for c in self.changes:
            if c.attention or c.key in ("vocab_size", "state.mem_len"):  # sizes: the data's, the run's
                continue
            head, _, rest = c.key.partition(".")
            if not rest:  # an axis: the base's choice and its params; its sizes stay the run's
                out[head] = ({k: copy.deepcopy(b[head][k]) for k in ("name", "params")} if isinstance(b[head], dict)
                             else b[head])
                continue
            node, src = out.setdefault(head, {}), b[head]
            *path, last = rest.split(".")
            for part in path:
                node, src = node.setdefault(part, {}), src[part]
            node[last] = copy.deepcopy(src.get(last))
        return out

    def twin(self) -> dict:
        """The base with this member's sizes and its changes other than attention: what ``dense``
        must build."""
        return compose(self.base, self.sizes, tuple(c for c in self.changes if not c.attention))


REGISTRY: dict[str, Member] = {}


def compose(kind: str, sizes: dict, changes: tuple[Change, ...]) -> dict:
    d = merge(base(kind), sizes)
    for c in changes:
        set_key(d, c.key, copy.deepcopy(c.value))
    return d


def _register(name: str, paper: str, preset: dict, doc: str, at_context=None, kind=None, sizes=None,
              changes=()) -> Callable[..., Spec]:
    def make(**overrides) -> Spec:
        spec = Spec.from_dict({"member": name, "paper": paper, **own_depth(preset, overrides)})
        return spec.replace(**overrides) if overrides else spec
    make.__name__, make.__doc__ = name, f"{paper}\n\n{doc}"
    REGISTRY[name] = Member(name, paper, make, at_context, kind, sizes or {}, tuple(changes), preset)
    MEMBERS.register(name, make, paper=paper)
    return make


def own_depth(preset: dict, overrides: dict) -> dict:
    """``preset`` with its own ``pattern.per_layer`` resampled to the depth the ``overrides`` give
    (``axis__field`` or axis-dict keys), unless they give the list or another pattern."""
    flat = {k.replace("__", "."): v for k, v in overrides.items()}
    depth, pattern = flat.get("depth"), flat.get("pattern")
    n = flat.get("depth.n_layers", depth.get("n_layers") if isinstance(depth, dict) else None)
    given = dict(pattern) if isinstance(pattern, dict) else {}
    given.update({k.split(".", 1)[1]: v for k, v in flat.items() if k.startswith("pattern.")})
    own = preset.get("pattern", {})
    if not isinstance(n, int) or not own.get("per_layer") or "per_layer" in given \
            or given.get("name", own.get("name")) != own.get("name"):
        return preset
    out = copy.deepcopy(preset)
    out["pattern"]["per_layer"] = follow_depth(out["pattern"]["per_layer"], n)
    return out


def member(name: str, paper: str, kind: str, *, sizes: dict | None = None, changes=(), at_context=None):
    """Register the function's docstring as member ``name``: the ``kind`` base (``recipes.BASES``) at
    ``sizes`` with ``changes``."""
    def register(fn: Callable[[], None]) -> Callable[..., Spec]:
        return _register(name, paper, compose(kind, sizes or {}, tuple(changes)), fn.__doc__ or "", at_context,
                         kind, sizes, changes)
    return register


def recurrent(name: str, paper: str):
    """Register a recurrent member: the function returns its whole spec dict (no Transformer base)."""
    def register(fn: Callable[[], dict]) -> Callable[..., Spec]:
        return _register(name, paper, fn(), fn.__doc__ or "")
    return register


def get(name: str) -> Callable[..., Spec]:
    if name not in REGISTRY:
        raise ValueError(f"unknown member {name!r}; valid members: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name].make


def describe() -> list[dict]:
    return [{"name": m.name, "paper": m.paper, "model": (s := m.make()).model, "choices": s.choices()}
            for m in REGISTRY.values()]


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "params":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def diff_specs(a: Spec, b: Spec) -> list[tuple[str, Any, Any]]:
    """(key, a's value, b's value) for every spec field in which ``a`` and ``b`` differ (names aside)."""
    fa, fb = (_flat({k: v for k, v in s.to_dict().items() if k not in ("member", "paper")}) for s in (a, b))
    return [(k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def diff(a: str, b: str) -> list[tuple[str, Any, Any, str]]:
    """The spec fields in which members ``a`` and ``b`` differ: (key, a's value, b's value, the
    source of each side's change, where one is declared)."""
    def source(name: str, key: str) -> str:
        return "; ".join(f"{name}: {c.source}" for c in REGISTRY[name].changes
                         if key == c.key or key.startswith(c.key + ".") or c.key.startswith(key + "."))
    return [(key, va, vb, " | ".join(filter(None, (source(a, key), source(b, key)))))
            for key, va, vb in diff_specs(get(a)(), get(b)())]
