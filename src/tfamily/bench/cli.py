"""`tfamily bench NAME`, `tfamily patterns`, `tfamily plot NAME`.

Each benchmark or plot is a module with ``add_args(parser)`` and ``run(args) -> int``, listed
by name here and imported only when used; ``group`` lays such a table out as one command
(the reproductions use it too: ``tfamily.repro.cli``).
"""
from __future__ import annotations

import importlib

BENCHES = {
    "attention": "tfamily.bench.attention",
    "flex-floor": "tfamily.bench.flex_floor",
    "train": "tfamily.bench.train",
    "xl-eval": "tfamily.bench.xl_eval",
    "lsh": "tfamily.bench.lsh",
    "reversible": "tfamily.bench.reversible",
    "sdpa-tiles": "tfamily.bench.sdpa_tiles",
    "peers": "tfamily.bench.peers",
    "recipe": "tfamily.bench.recipe",
    "generate": "tfamily.bench.generate",
}
PLOTS = {
    "curves": "tfamily.compare",
    "spans": "tfamily.bench.spans",
    "ponder": "tfamily.bench.ponder",
    "alignment": "tfamily.bench.alignment",
}
PATTERNS_MODULE = "tfamily.bench.pattern_pictures"


def _available(table: dict) -> dict:
    out = {}
    for name, module in table.items():
        try:
            out[name] = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if not (e.name and e.name.startswith("tfamily")):
                raise
    return out


def group(sub, command: str, help_: str, table: dict) -> None:
    p = sub.add_parser(command, help=help_)
    inner = p.add_subparsers(dest="name", metavar="NAME")
    for name, mod in _available(table).items():
        q = inner.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else None)
        mod.add_args(q)
        q.set_defaults(func=_no_negative_counts(mod.run))
    p.set_defaults(func=lambda args: p.print_help() or 2)


def _no_negative_counts(run):
    """Every integer option of a bench or repro is a count, size or seed: a negative one is refused
    in one line here rather than deep inside (``torch.set_num_threads(-1)`` raises RuntimeError)."""
    def checked(args):
        for name, v in vars(args).items():
            if isinstance(v, int) and not isinstance(v, bool) and v < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {v}")
        return run(args)
    return checked


def add_parser(sub) -> None:
    group(sub, "bench", "benchmarks (speed and memory), printed and saved as JSON/CSV", BENCHES)
    group(sub, "plot", "plots of trained models", PLOTS)
    mods = _available({"patterns": PATTERNS_MODULE})
    if "patterns" in mods:
        p = sub.add_parser("patterns", help="draw every attention pattern as a PNG")
        mods["patterns"].add_args(p)
        p.set_defaults(func=mods["patterns"].run)
