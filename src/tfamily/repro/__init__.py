"""Paper reproductions, apart from the speed and memory benchmarks in ``bench/``.

Each reproduction trains family members on a paper's task through the shared loop
(``train.Trainer`` driving a ``train.Task``) and writes a table and a plot with the
shared results writer (``bench/results.write_rows``). `tfamily repro NAME` runs one;
this table lists them (module with its ``Settings``, ``add_args(parser)`` and ``run(args) -> int``,
as a benchmark: ``bench/cli.py``).
"""
from __future__ import annotations

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
