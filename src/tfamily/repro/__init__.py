"""Paper reproductions, apart from the speed and memory benchmarks in ``bench/``.

Each reproduction trains family members on a paper's task through the shared loop
(``train.Trainer`` driving a ``train.Task``) and writes a table and a plot with the
shared results writer (``bench/results.write_rows``). `tfamily repro NAME` runs one;
this table lists them (module with its ``Settings``, ``add_args(parser)`` and ``run(args) -> int``,
as a benchmark: ``bench/cli.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings.schema import setting
from ..train.grid import SHARD_HELP

REPROS = {
    "reformer-duplication": "tfamily.repro.reformer_duplication",
    "sparse-text": "tfamily.repro.sparse_text",
    "mnist-local2d": "tfamily.repro.mnist_pixels",
    "act-parity": "tfamily.repro.act_parity",
    "ut-algorithmic": "tfamily.repro.ut_algorithmic",
    "al-rfou-aux": "tfamily.repro.al_rfou_aux",
    "reverse-dictionary": "tfamily.repro.reverse_dictionary",
}


def budget(args) -> dict:
    """The ``tfamily train`` budget overrides of a repro's ``--steps`` / ``--time`` (steps win; a
    ``--time-cap``, where the repro has one, also stops a ``--steps`` run at that many seconds)."""
    if args.steps:
        return {"train.max_steps": args.steps, "train.time_budget": getattr(args, "time_cap", None)}
    return {"train.max_steps": None, "train.time_budget": args.time}


@dataclass
class LoopRunFlags:
    """The run flags (``--precision`` to ``--json``) of a repro whose models train through
    ``tfamily train``'s loop. Its ``Settings`` lists this class first among its bases and a class of
    its own flags second (``class Settings(LoopRunFlags, OwnFlags)``): dataclass fields follow the
    bases last to first, so these come after the repro's own in ``--help``. Each repro redeclares
    ``out`` for the default directory its help names; the field keeps its place here."""
    precision: str = setting("fp32", flag=True, choices=("auto", "bf16", "fp32"))
    threads: int | None = setting(None, flag=True, lo=0)
    device: str = setting("auto", flag=True)
    seed: int = setting(0, flag=True, lo=0)
    out: str | None = setting(None, flag=True, help="directory (default runs/repro/<name>/<time>)")
    shard: str | None = setting(None, flag=True, metavar="I/N", help=SHARD_HELP)
    data_dir: str | None = setting(None, flag=True, metavar="DIR",
                                   help="data directory (else $TFAMILY_DATA, else the user cache)")
    json: bool = setting(False, flag=True)
