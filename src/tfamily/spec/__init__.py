"""Specs: frozen dataclasses, one per design axis, validated on construction.

A member is a ``Spec``: a point in the grid of axes. Specs never enter modules;
``build.py`` turns them into modules. The valid names of each axis are read from its
registry (``tfamily/registry.py``), where the parts register themselves: a new part adds
one registration next to its code and the spec accepts it. Checks that need a part
(a kernel validating its parameters, a pattern built from its sub-specs) are
registered by ``tfamily/spec/part_checks.py``, next to build, and run through ``registry.CHECKS``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from typing import Any

from ..base import numbers
from .. import registry
from ..base.dicts import deep_merge
from .checks import SPEC_CHECKS
from .words import choices


def check_choice(axis: str, value: str) -> None:
    """Refuse a value not registered on ``axis`` (``registry.AXES``), naming the valid ones."""
    registry.AXES[axis].check(value)


@dataclass(frozen=True)
class PatternSpec:
    """Which keys each query may see. ``params`` are the pattern's own (e.g. window).
    ``per_layer``: optional list of PatternSpecs cycled over layers."""
    name: str = "causal"
    params: dict = field(default_factory=dict)
    per_layer: tuple = ()

    def __post_init__(self):
        check_choice("pattern", self.name)
        if not isinstance(self.per_layer, (list, tuple)):
            raise TypeError(f"pattern.per_layer must be a list of pattern specs (dicts with 'name' and "
                            f"optional 'params'), got {self.per_layer!r}")
        for p in self.per_layer:
            if not isinstance(p, (PatternSpec, dict)):
                raise TypeError(f"pattern.per_layer entries must be dicts like {{'name': 'causal'}}, got {p!r}")
        object.__setattr__(self, "per_layer", tuple(
            p if isinstance(p, PatternSpec) else PatternSpec(**p) for p in self.per_layer))

    def for_layer(self, i: int) -> PatternSpec:
        return self.per_layer[i % len(self.per_layer)] if self.per_layer else self


@dataclass(frozen=True)
class KernelSpec:
    name: str = "sdpa"
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choice("kernel", self.name)


@dataclass(frozen=True)
class PositionSpec:
    name: str = "sinusoidal"
    max_len: int = 2048
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choice("position", self.name)
        numbers.check_int("position.max_len", self.max_len)

    @property
    def table_len(self) -> int:
        """The rows of the part's table, ``max_len``, for a part sized by it (a learned table: its
        parameters and the longest sequence the model takes); 0 for one that takes any length. Read
        from the part's registration (``max_len`` among its needs), never from its name."""
        return self.max_len if "max_len" in registry.POSITIONS.entry(self.name).needs else 0


@dataclass(frozen=True)
class HeadsSpec:
    n_heads: int = 8
    n_kv_heads: int | None = None  # None = n_heads (multi-head); 1 = multi-query
    d_head: int | None = None      # None = d_model // n_heads
    shared_qk: bool = False
    scale: float | None = None     # the q.k factor; None = 1/sqrt(d_head); T5's is 1.0 (nn/attention.py)
    global_qkv: bool = False       # Longformer's own projections for global tokens (nn/heads/global_qkv.py)

    def __post_init__(self):
        numbers.check_number("heads.scale", self.scale, 0, lo_open=True, none=True, hint="T5 uses 1.0")
        numbers.check_flag("heads.global_qkv", self.global_qkv)
        numbers.check_int("heads.n_heads", self.n_heads)
        numbers.check_int("heads.n_kv_heads", self.n_kv_heads, none=True)
        numbers.check_int("heads.d_head", self.d_head, none=True)
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}; "
                             f"n_kv_heads must divide n_heads (valid: "
                             f"{[d for d in range(1, self.n_heads + 1) if self.n_heads % d == 0]})")
        if self.shared_qk and self.kv_heads != self.n_heads:  # keys are the queries (Kitaev et al. 2020)
            raise ValueError(f"heads.shared_qk=True needs n_kv_heads == n_heads, got n_kv_heads={self.n_kv_heads}, "
                             f"n_heads={self.n_heads}; drop n_kv_heads or shared_qk")

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads


@dataclass(frozen=True)
class ResidualSpec:
    name: str = "pre_norm"
    params: dict = field(default_factory=dict)  # e.g. {"gate_bias": 2.0} for a gate (nn/residual/gates.py)

    def __post_init__(self):
        check_choice("residual", self.name)


@dataclass(frozen=True)
class DepthSpec:
    name: str = "stack"
    n_layers: int = 6
    n_enc_layers: int | None = None  # encoder-decoder: None = n_layers
    checkpointing: bool = False
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choice("depth", self.name)
        numbers.check_int("depth.n_layers", self.n_layers)
        numbers.check_int("depth.n_enc_layers", self.n_enc_layers, none=True)


@dataclass(frozen=True)
class StateSpec:
    name: str = "kv_cache"
    mem_len: int = 0
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choice("state", self.name)
        numbers.check_int("state.mem_len", self.mem_len, lo=0)

    @property
    def keeps_memory(self) -> bool:
        """Whether the state keeps ``mem_len`` earlier layer inputs (Transformer-XL's memory): read from
        its registration (``mem_len`` among its needs), never from its name."""
        return "mem_len" in registry.STATES.entry(self.name).needs


@dataclass(frozen=True)
class FeedForwardSpec:
    name: str = "mlp"
    d_ff: int | None = None  # None = 4 * d_model
    activation: str = "gelu"
    chunks: int = 1
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choice("ff", self.name)
        check_choice("activation", self.activation)
        numbers.check_int("ff.d_ff", self.d_ff, none=True)
        numbers.check_int("ff.chunks", self.chunks)


@dataclass(frozen=True)
class ObjectiveSpec:
    name: str = "causal_lm"
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        check_choice("objective", self.name)


@dataclass(frozen=True)
class InitSpec:
    """How the attention, feed-forward, embedding and position weights start (``nn/init/``):
    ``torch`` keeps each part's own defaults, ``normal`` is GPT-2's N(0, std) scheme."""
    name: str = "torch"
    params: dict = field(default_factory=dict)  # e.g. {"std": 0.02, "scale_residual": True}

    def __post_init__(self):
        check_choice("init", self.name)
        registry.INITS.check_params(self.name, self.params, "init.params")


@dataclass(frozen=True)
class NormSpec:
    """The norm of the residuals, final norm and MLM head (``nn/norm/``); ``embed``: one on the embeddings (BERT)."""
    name: str = "layer_norm"
    params: dict = field(default_factory=dict)  # e.g. {"eps": 1e-6}
    embed: bool = False

    def __post_init__(self):
        check_choice("norm", self.name)
        numbers.check_flag("norm.embed", self.embed)
        registry.NORMS.check_params(self.name, self.params, "norm.params")


AXES = {"pattern": PatternSpec, "kernel": KernelSpec, "position": PositionSpec, "heads": HeadsSpec,
        "residual": ResidualSpec, "depth": DepthSpec, "state": StateSpec, "ff": FeedForwardSpec,
        "objective": ObjectiveSpec, "init": InitSpec, "norm": NormSpec}


def model_objectives(model: str) -> list[str]:
    """The objectives registered for ``model`` (their ``models`` in ``registry.OBJECTIVES``)."""
    return [o for o in registry.OBJECTIVES if model in registry.OBJECTIVES.entry(o).info.get("models", ())]


@dataclass(frozen=True)
class Spec:
    member: str
    model: str = "decoder"
    paper: str = ""
    vocab_size: int = 256
    d_model: int = 512
    # Dropout: one rate and where it acts. ``dropout`` is the sublayer outputs' (before the
    # residual add); the other sites take their own rate, or ``dropout``'s when null.
    dropout: float = 0.1
    embed_dropout: float | None = None  # on the embedding + position sum
    attn_dropout: float | None = 0.0    # on the attention probabilities
    ff_dropout: float | None = None     # on the feed-forward's hidden activations
    tie_embeddings: bool = True
    # Input and output scale: tokens times sqrt(d_model) (Vaswani et al. 2017, section 3.4),
    # and a tied head read through a learned scalar starting at d^-0.5 (nn/embedding/head.py).
    scale_embeddings: bool = True
    logit_scale: bool = True
    bias: bool = True                   # biases in the attention and feed-forward linears and the norms
    # Learned token-type (segment) rows added to the input, BERT's sentence A / B (nn/embedding/token_type.py);
    # 0: none. A model with them takes ``token_types=`` beside its tokens.
    token_types: int = 0
    pattern: PatternSpec = field(default_factory=PatternSpec)
    kernel: KernelSpec = field(default_factory=KernelSpec)
    position: PositionSpec = field(default_factory=PositionSpec)
    heads: HeadsSpec = field(default_factory=HeadsSpec)
    residual: ResidualSpec = field(default_factory=ResidualSpec)
    depth: DepthSpec = field(default_factory=DepthSpec)
    state: StateSpec = field(default_factory=StateSpec)
    ff: FeedForwardSpec = field(default_factory=FeedForwardSpec)
    objective: ObjectiveSpec = field(default_factory=ObjectiveSpec)
    init: InitSpec = field(default_factory=InitSpec)
    norm: NormSpec = field(default_factory=NormSpec)

    def __post_init__(self):
        check_choice("model", self.model)
        numbers.check_int("vocab_size", self.vocab_size, lo=2)
        numbers.check_int("d_model", self.d_model)
        numbers.check_prob("dropout", self.dropout)
        for site in ("embed_dropout", "attn_dropout", "ff_dropout"):
            numbers.check_prob(site, getattr(self, site), none=True, hint="null follows dropout")
        for flag in ("tie_embeddings", "scale_embeddings", "logit_scale", "bias"):
            numbers.check_flag(flag, getattr(self, flag))
        numbers.check_int("token_types", self.token_types, lo=0)
        for axis, cls in AXES.items():
            value = getattr(self, axis)
            if isinstance(value, dict):
                object.__setattr__(self, axis, cls(**value))
            elif not isinstance(value, cls):
                raise TypeError(f"{axis} must be a {cls.__name__} or dict, got {type(value).__name__}")
        if self.heads.d_head is None and self.d_model % self.heads.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.heads.n_heads}; "
                             f"pick n_heads dividing d_model or set heads.d_head")
        if self.objective.name not in model_objectives(self.model):
            raise ValueError(f"objective {self.objective.name!r} does not fit model {self.model!r}; "
                             f"valid: {model_objectives(self.model)}")
        for check in (*SPEC_CHECKS, *registry.CHECKS.values()):
            check(self)

    @property
    def d_head(self) -> int:
        return self.heads.d_head or self.d_model // self.heads.n_heads

    @property
    def d_ff(self) -> int:
        return self.ff.d_ff or 4 * self.d_model

    def dropout_at(self, site: str) -> float:
        """The dropout rate at ``site``: "residual", "embed", "attn" or "ff"."""
        if site == "residual":
            return self.dropout
        rate = getattr(self, f"{site}_dropout")
        return self.dropout if rate is None else rate

    # -- overrides and serialisation -------------------------------------------------
    def replace(self, **overrides: Any) -> Spec:
        """Top-level fields, ``axis=dict(...)`` partial updates, or ``axis__field=value``.
        Dotted keys (``heads.n_kv_heads``) work through ``override``."""
        return self.override({k.replace("__", "."): v for k, v in overrides.items()})

    def override(self, overrides: dict[str, Any]) -> Spec:
        """Dotted keys (``heads.n_kv_heads``) or top-level ones (an axis given as a dict updates
        that axis). A new ``name`` on an axis drops the old choice's ``params`` and ``per_layer``
        (``renamed``) unless the same overrides give them."""
        d = self.to_dict()
        for key, value in overrides.items():
            head, _, rest = key.partition(".")
            if head not in d:
                raise ValueError(f"unknown spec key {key!r}; valid keys: {', '.join(valid_keys())}")
            if rest and (head not in AXES or rest not in {f.name for f in fields(AXES[head])}):
                raise ValueError(f"unknown spec key {key!r}; valid keys: {', '.join(valid_keys())}")
        for key, value in overrides.items():
            set_key(d, key, value)
        for key, value in overrides.items():  # params given beside a new name win over the reset
            head, _, rest = key.partition(".")
            if rest in ("params", "per_layer"):
                d[head][rest] = value
        return Spec.from_dict(d)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, d: dict) -> Spec:
        d = dict(d)
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown spec keys {sorted(unknown)}; valid keys: {', '.join(valid_keys())}")
        for axis, acls in AXES.items():
            if isinstance(d.get(axis), dict):
                sub = dict(d[axis])
                bad = set(sub) - {f.name for f in fields(acls)}
                if bad:
                    raise ValueError(f"unknown {axis} keys {sorted(bad)}; valid: "
                                     f"{[f.name for f in fields(acls)]}")
                d[axis] = acls(**sub)
        return cls(**d)

    def choices(self) -> dict[str, Any]:
        """The value chosen on each axis (for ``tfamily members --json``; ``spec/words.py``)."""
        return choices(self)


def renamed(axis: dict, update: dict) -> dict:
    """The axis dict ``axis`` ready for ``update``: when ``update`` names another choice, without
    the old choice's ``params`` and ``per_layer`` (a sliding window's sizes mean nothing to causal
    attention, an LSH kernel's buckets nothing to SDPA), so a member's twin on that axis is the
    plain choice, not the old one renamed."""
    if not isinstance(axis, dict) or not isinstance(update, dict) or "name" not in update \
            or update["name"] == axis.get("name"):
        return axis
    return {k: v for k, v in axis.items() if k not in ("params", "per_layer")}


def set_key(d: dict, key: str, value: Any) -> None:
    """Set the spec key ``key`` (``d_model``, ``heads.n_kv_heads``, or an axis as a dict) in the spec
    dict ``d`` in place, with ``renamed``'s rule; not validated (``Spec.from_dict`` does that)."""
    head, _, rest = key.partition(".")
    if rest:
        d[head] = renamed(d[head], {"name": value}) if rest == "name" else d[head]
        *path, last = rest.split(".")
        node = d[head]
        for part in path:  # init.params.scale_residual
            node = node.setdefault(part, {})
        node[last] = value
    elif head in AXES and isinstance(value, dict) and isinstance(d.get(head), dict):
        d[head] = {**renamed(d[head], value), **value}
    else:
        d[head] = value


def merge(d: dict, update: dict) -> dict:
    """``update`` (nested, as a config's ``model`` section) over the spec dict ``d``: mappings
    recurse, other values replace, and an axis given another name starts without the old choice's
    ``params`` and ``per_layer`` (``renamed``)."""
    base = {key: renamed(axis, update[key]) if key in AXES and key in update else axis for key, axis in d.items()}
    return deep_merge(base, update)


def valid_keys() -> list[str]:
    top = [f.name for f in fields(Spec) if f.name not in AXES]
    return top + [f"{a}.{f.name}" for a, c in AXES.items() for f in fields(c)]
