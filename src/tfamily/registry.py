"""One registry per design axis: the names a spec may choose and the part each name builds.

The registry is the single source of truth for an axis's choices: ``spec/__init__.py`` derives its
valid names and parameter keys from here, and ``build.py`` constructs parts through here.

Import direction: this module imports nothing from tfamily. Parts register into it
(the axis folders under ``nn/``: ``patterns``, ``kernels``, ``position``, ``heads``,
``residual``, ``norm``, ``feedforward``, ``init``, ``depth``, ``state``; ``objectives/``; the model
kinds, whose assembly reads the whole spec, in ``build``), and ``spec/__init__.py`` reads it, so the spec never imports ``nn/``. Each
registry names the modules that register into it (``providers``) and imports them the
first time its names are read, so the valid names are the registered ones whichever
module was imported first.

An entry is a constructor plus ``needs``: the arguments the builder supplies from the
spec's shape (``d_model``, ``n_heads``, ...). Every other keyword of the constructor is a
user parameter (``params`` in the spec), so the valid parameter keys come from the
constructor's signature, never from a list kept by hand.
"""
from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    """``make(**needs, **params)`` builds the part; ``info`` holds facts the builder reads
    (a position's stage, whether a residual needs a final norm)."""

    name: str
    make: Callable
    needs: tuple[str, ...] = ()
    info: Mapping[str, Any] = field(default_factory=dict)

    def params(self) -> tuple[str, ...] | None:
        """The user parameter keys: the constructor's named keywords minus ``needs``.
        A ``**kwargs`` catch-all adds none (``nn.Module`` subclasses without their own
        ``__init__`` show one), so every accepted key is a named one. None when the
        constructor has no signature to read."""
        keywords = _keywords(self.make)
        return None if keywords is None else tuple(k for k, _ in keywords if k not in self.needs)

    def required(self) -> tuple[str, ...]:
        """The user parameters without a default (a spec must set them)."""
        keywords = _keywords(self.make) or ()
        return tuple(k for k, has_default in keywords if k not in self.needs and not has_default)


@functools.lru_cache(maxsize=None)
def _keywords(make: Callable) -> tuple[tuple[str, bool], ...] | None:
    """``(name, has a default)`` for each named keyword of ``make``, read once per
    constructor (``inspect.signature`` is slow and specs are checked on every construction)."""
    try:
        sig = inspect.signature(make)
    except (TypeError, ValueError):
        return None
    return tuple((p.name, p.default is not p.empty) for p in sig.parameters.values()
                 if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))


class Registry(Mapping):
    """``name -> constructor`` for one axis; reads as a mapping (``REG[name]``, ``in``,
    ``sorted(REG)``) and builds with ``REG.make(name, params, **supplied)``."""

    def __init__(self, axis: str, providers: tuple[str, ...] = ()):
        self.axis, self.providers = axis, providers
        self._entries: dict[str, Entry] = {}
        self._loaded = not providers

    def register(self, name: str, make: Callable, *, needs: tuple[str, ...] = (), **info) -> Callable:
        old = self._entries.get(name)
        if old is not None and old.make is not make:
            raise ValueError(f"{self.axis} {name!r} is already registered to {old.make!r}; pick another name")
        self._entries[name] = Entry(name, make, tuple(needs), info)
        return make

    def unregister(self, name: str) -> None:
        """Drop ``name`` (a toy registered by a test); a name never registered is refused."""
        self.check(name)
        del self._entries[name]

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True  # before importing: a provider reads its own registry while loading
            for module in self.providers:
                importlib.import_module(module)

    def entry(self, name: str) -> Entry:
        self.check(name)
        return self._entries[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def in_order(self) -> list[str]:
        """The names in the order they were registered (a listing that reads in its folder's order)."""
        self._load()
        return list(self._entries)

    def check(self, name: Any) -> None:
        """Refuse a name that is not registered, listing the valid ones."""
        if not isinstance(name, str):
            raise TypeError(f"{self.axis} must be a string naming a choice, got {name!r}; "
                            f"valid: {', '.join(self.names())}")
        self._load()
        if name not in self._entries:
            raise ValueError(f"unknown {self.axis} {name!r}; valid choices: {', '.join(self.names())}")

    def valid_params(self, name: str) -> tuple[str, ...] | None:
        return self.entry(name).params()

    def check_params(self, name: str, params: Any, where: str | None = None) -> None:
        """Refuse ``params`` that is not a dict or has keys the part does not take."""
        where = where or f"{self.axis}.params"
        if not isinstance(params, Mapping):
            raise TypeError(f"{where} must be a dict of parameters for {self.axis} {name!r}, got {params!r}")
        bad = [k for k in params if not isinstance(k, str)]
        if bad:
            raise TypeError(f"{where} keys must be strings, got {bad!r}")
        valid = self.valid_params(name)
        if valid is None:
            return
        unknown = sorted(set(params) - set(valid))
        if unknown:
            listed = ", ".join(valid) if valid else f"none ({self.axis} {name!r} takes no parameters)"
            raise ValueError(f"unknown {where} {unknown} for {self.axis} {name!r}; valid keys: {listed}")
        missing = [k for k in self.entry(name).required() if k not in params]
        if missing:
            raise ValueError(f"{where} for {self.axis} {name!r} must set {missing} (no default); "
                             f"e.g. {where}={{{missing[0]!r}: ...}}")

    def make(self, name: str, params: Mapping | None = None, /, **supplied: Any) -> Any:
        """Build ``name`` with its params and the ``needs`` taken from ``supplied``."""
        params = dict(params or {})
        self.check_params(name, params)
        entry = self._entries[name]
        # A need with a default in the constructor (e.g. ``bias=True``) may be left out by callers
        # that build the part alone; the builder always supplies it.
        defaults = {k for k, has_default in (_keywords(entry.make) or ()) if has_default}
        missing = [k for k in entry.needs if k not in supplied and k not in defaults]
        if missing:
            raise TypeError(f"building {self.axis} {name!r} needs {missing} from the builder")
        return entry.make(**{k: supplied[k] for k in entry.needs if k in supplied}, **params)

    # -- Mapping -------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Callable:
        return self.entry(name).make

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.axis!r}, {self.names() if self._loaded else '...'})"


_BUILD = "tfamily.build"

MODELS = Registry("model", (_BUILD,))  # assembling a model reads the spec: build.py
PATTERNS = Registry("pattern", ("tfamily.nn.patterns",))
KERNELS = Registry("kernel", ("tfamily.nn.kernels",))
POSITIONS = Registry("position", ("tfamily.nn.position",))
HEADS = Registry("heads", ("tfamily.nn.heads",))
RESIDUALS = Registry("residual", ("tfamily.nn.residual",))
DEPTHS = Registry("depth", ("tfamily.nn.depth",))
STATES = Registry("state", ("tfamily.nn.state", "tfamily.nn.depth"))
FEEDFORWARDS = Registry("ff", ("tfamily.nn.feedforward",))
ACTIVATIONS = Registry("activation", ("tfamily.nn.feedforward",))
OBJECTIVES = Registry("objective", ("tfamily.objectives",))
INITS = Registry("init", ("tfamily.nn.init",))
NORMS = Registry("norm", ("tfamily.nn.norm",))
# Alignment scores of recurrent encoder-decoders (dot, general, concat, additive), chosen in a
# recurrent depth's params; not a spec axis of their own.
ALIGNMENTS = Registry("alignment", ("tfamily.nn.alignment",))
# The member presets by name (``tfamily.members`` registers each): ``build("gpt")`` resolves a name
# here, so the builder never imports the presets that are built on it. Not a spec axis.
MEMBERS = Registry("member", ("tfamily.members",))
# Cross-axis checks (name -> check(spec) raising ValueError), run on every Spec; the ones
# that need a part (a kernel validating its parameters) live next to build (tfamily/spec/part_checks.py).
CHECKS = Registry("check", ("tfamily.spec.part_checks",))
# Extension points outside the spec: the arena's tasks (name -> ``arena.tasks.base.ArenaTask``, one file
# per task in ``arena/tasks/``) and the Hugging Face families (config.json's model_type -> a module with
# the names of ``pretrained.family.Family``, one module per family in ``pretrained/``).
ARENA_TASKS = Registry("arena task", ("tfamily.arena.tasks",))
PRETRAINED = Registry("pretrained family", ("tfamily.pretrained.families",))
# Where a run may start from (``train.init_from``): a reader per kind of checkpoint (name -> ``read(path)
# -> train.transfer.Source``, with ``claims(path)`` in its info): a Hugging Face directory, a tfamily run.
# The readers live with the importers (``pretrained/transfer.py``), above the trainer that reads them here.
SOURCES = Registry("checkpoint source", ("tfamily.pretrained.transfer",))

AXES: dict[str, Registry] = {r.axis: r for r in (MODELS, PATTERNS, KERNELS, POSITIONS, HEADS, RESIDUALS,
                                                  DEPTHS, STATES, FEEDFORWARDS, ACTIVATIONS, OBJECTIVES,
                                                  INITS, NORMS)}
