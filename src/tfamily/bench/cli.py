"""`tfamily bench NAME`, `tfamily patterns`, `tfamily plot NAME`.

Each benchmark or plot is a module with its settings declared once (a ``Settings`` dataclass of
``settings.schema.setting`` fields, which ``add_args(parser)`` turns into flags) and
``run(args) -> int``, listed by name here and imported only when used; ``group`` lays such a
table out as one command (the reproductions use it too: ``tfamily.repro.cli``).
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util

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
    "data-prepare": "tfamily.bench.data_prepare",
}
PLOTS = {
    "curves": "tfamily.compare",
    "spans": "tfamily.bench.spans",
    "ponder": "tfamily.bench.ponder",
    "alignment": "tfamily.bench.alignment",
}
PATTERNS_MODULE = "tfamily.bench.pattern_pictures"


def _exists(module: str) -> bool:
    """False for a module of the table not written yet."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def first_doc_line(module: str) -> str | None:
    """The first paragraph of ``module``'s docstring on one line, read from its source without
    importing it (most benchmark modules import torch, which `tfamily bench --help` does without).
    The paragraph, not its first line: a line ends mid-phrase, a paragraph at a sentence."""
    origin = importlib.util.find_spec(module).origin
    doc = ast.get_docstring(ast.parse(open(origin, encoding="utf-8").read()))
    return " ".join(doc.strip().split("\n\n")[0].split()) if doc else None


def _declare(module: str, parser) -> None:
    mod = importlib.import_module(module)
    mod.add_args(parser)
    parser.set_defaults(func=mod.run)


def group(sub, command: str, help_: str, table: dict) -> None:
    p = sub.add_parser(command, help=help_)
    inner = p.add_subparsers(dest="name", metavar="NAME")
    for name, module in table.items():
        if _exists(module):
            inner.add_parser(name, help=first_doc_line(module), build=functools.partial(_declare, module))
    p.set_defaults(func=lambda args: p.print_help() or 2)


def add_parser(sub) -> None:
    group(sub, "bench", "benchmarks (speed and memory), printed and saved as JSON/CSV", BENCHES)
    group(sub, "plot", "plots of trained models", PLOTS)
    if _exists(PATTERNS_MODULE):
        def declare(p):
            mod = importlib.import_module(PATTERNS_MODULE)
            mod.add_args(p)
            p.set_defaults(func=mod.run)
        sub.add_parser("patterns", help="draw every attention pattern as a PNG", build=declare)
