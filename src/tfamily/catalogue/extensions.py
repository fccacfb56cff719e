"""Every extension point of tfamily: its registry, its Protocol, its folder, and what to write to add
one. ``page()`` renders them, each with the names registered now, as the documentation's
"Extension points" page (``docs/hooks.py`` generates it at build time), so a part, task or family
registered anywhere is listed there with no edit to the docs.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from types import ModuleType

from .. import registry


@dataclass(frozen=True)
class Point:
    """One extension point: ``protocol`` is the dotted path of the Protocol a new entry satisfies."""

    what: str
    registry: registry.Registry
    protocol: str
    folder: str
    add: str

    def entries(self) -> list[tuple[str, str, str]]:
        """(name, what it builds, its citation) for each registered name, in registration order."""
        rows = []
        for name in self.registry.in_order():
            entry = self.registry.entry(name)
            made = entry.info.get("family", entry.info.get("task", entry.make))
            if isinstance(made, ModuleType):
                rows.append((name, made.__name__, _cite(made)))
                continue
            code = getattr(made, "maker", made)  # an arena task: its maker's module says what it is
            where = f"{code.__module__}.{code.__qualname__}"
            rows.append((name, where, _cite(inspect.getmodule(code) if code is not made else made)))
        return rows


def _cite(obj) -> str:
    """A part's own citation (``tour.Cited``), else the first docstring line that cites a year."""
    from .tour import _YEAR, cite
    if isinstance(obj, ModuleType):
        return next((ln.strip() for ln in (obj.__doc__ or "").splitlines() if _YEAR.search(ln)), "")
    text = cite(obj)
    return "" if text.startswith("(no citation") else text


_PART = ("a class with the Protocol's methods and a `citation` (the paper and equation, `tour.Cited`) "
         "in `{folder}NAME.py`, and its `{reg}.register(\"name\", Class, needs=...)` line beside it")
POINTS = (
    Point("attention pattern", registry.PATTERNS, "tfamily.nn.patterns.base.Pattern", "nn/patterns/",
          _PART.format(folder="nn/patterns/", reg="PATTERNS") + " (or in `nn/patterns/__init__.py`'s table)"),
    Point("attention kernel", registry.KERNELS, "tfamily.nn.kernels.base.Kernel", "nn/kernels/",
          _PART.format(folder="nn/kernels/", reg="KERNELS") + " (the table in `nn/kernels/__init__.py` says what "
                                                              "it holds and how it exports)"),
    Point("position", registry.POSITIONS, "tfamily.nn.position.absolute.InputPosition / "
          "tfamily.nn.attention.AttentionPosition", "nn/position/",
          _PART.format(folder="nn/position/", reg="POSITIONS") + ", with its `stage` (input or attention)"),
    Point("heads", registry.HEADS, "tfamily.nn.heads.base.Heads", "nn/heads/",
          _PART.format(folder="nn/heads/", reg="HEADS")),
    Point("residual", registry.RESIDUALS, "tfamily.nn.residual.base.Residual", "nn/residual/",
          _PART.format(folder="nn/residual/", reg="RESIDUALS") + ", with `final_norm`"),
    Point("norm", registry.NORMS, "tfamily.nn.norm.base.Norm", "nn/norm/", _PART.format(folder="nn/norm/", reg="NORMS")),
    Point("feed-forward", registry.FEEDFORWARDS, "tfamily.nn.feedforward.base.FeedForward", "nn/feedforward/",
          _PART.format(folder="nn/feedforward/", reg="FEEDFORWARDS") + " (`mixes_positions` if it does)"),
    Point("initialisation", registry.INITS, "tfamily.nn.init.base.InitScheme", "nn/init/",
          _PART.format(folder="nn/init/", reg="INITS")),
    Point("depth", registry.DEPTHS, "tfamily.nn.depth.base.Depth", "nn/depth/",
          _PART.format(folder="nn/depth/", reg="DEPTHS") + "; its maker takes plain needs (`blocks`, `n_layers`, "
                                                           "`final_norm`, ...), never the spec"),
    Point("state", registry.STATES, "tfamily.nn.state.base.State", "nn/state/",
          "a class with the State methods and a `citation` in `nn/state/NAME.py`, and `STATES.register(\"name\", "
          "make, needs=(\"layers\", ...))` beside it: `make` returns the model's `new_state` (`carried=True` if the "
          "trainer keeps it between batches)"),
    Point("objective", registry.OBJECTIVES, "tfamily.objectives.Objective", "objectives/",
          "a callable `objective(model, batch) -> (loss, metrics)` with a `citation` in `objectives/NAME.py`, and "
          "its `OBJECTIVES.register(\"name\", Class, models=(...))` line in `objectives/__init__.py`"),
    Point("model kind", registry.MODELS, "tfamily.models.hooks.Model", "models/ (assembled in build.py)",
          "the model's class in `models/NAME.py` (parts in, `ForwardsHooks` for `loss`), and a builder "
          "`_NAME(spec)` with its `MODELS.register` line in `build.py`, the one place a spec is read"),
    Point("arena task", registry.ARENA_TASKS, "tfamily.arena.tasks.base.ArenaTask", "arena/tasks/",
          "`arena/tasks/NAME.py` ending in `TASK = register(Declared(\"name\", length, make, ...))` (its length, "
          "metric, pairing, length checks and maker), imported in `arena/tasks/__init__.py`"),
    Point("pretrained family", registry.PRETRAINED, "tfamily.pretrained.families.Family", "pretrained/",
          "`pretrained/NAME.py` with the names of `Family` (import) or `Exports` (import and export: `exports(spec)`, "
          "`config`, `hf_weights`, `TITLE`, `MODEL`), and one `register(module, \"model_type\", ...)` line in "
          "`pretrained/families.py`"),
    Point("checkpoint source (--init-from)", registry.SOURCES, "tfamily.train.transfer.Source", "pretrained/transfer.py",
          "a reader `read(path) -> Source` (model, spec, vocabulary, path) and its `SOURCES.register(\"name\", read, "
          "claims=...)` line: the paths it claims, which no other reader claims"),
    Point("member", registry.MEMBERS, "tfamily.members.family.member", "members/__init__.py",
          "ten lines in `members/__init__.py`: a base, the paper's sizes and each change with its source"),
)


def page() -> str:
    """The "Extension points" page: one section per point, its registered names in a table."""
    for point in POINTS:  # every registry loads its providers (the CLI's names are the same ones)
        importlib.import_module(point.registry.providers[0]) if point.registry.providers else None
    lines = ["# Extension points", "",
             "Generated from the registries (`tfamily/catalogue/extensions.py`): every name below is registered in "
             "its folder, and a new one appears here, in the CLI and in `tfamily members NAME` with no "
             "other edit.", ""]
    for p in POINTS:
        lines += [f"## {p.what}", "", f"- registry: `tfamily.registry.{_attr(p.registry)}`",
                  f"- Protocol: `{p.protocol}`", f"- folder: `{p.folder}`", f"- to add one: {p.add}", "",
                  "| name | implementation | citation |", "|---|---|---|"]
        lines += [f"| `{n}` | `{impl}` | {cite.replace('|', '/')} |" for n, impl, cite in p.entries()]
        lines.append("")
    return "\n".join(lines)


def _attr(reg: registry.Registry) -> str:
    return next(name for name, value in vars(registry).items() if value is reg)
