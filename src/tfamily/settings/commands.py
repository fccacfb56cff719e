"""The own settings of `tfamily train`, `eval`, `generate`, `predict` and `demo` (a run's settings are
``run.Config``; `train` adds its flagged fields, ``--steps`` and the rest, as overrides)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from .run import PRECISIONS
from .schema import setting

DATA_DIR = "data directory (else $TFAMILY_DATA, else the user cache)"
JSON = "print one JSON object with the results last"
DEBUG = "show tracebacks instead of one-line errors"
THREADS = "torch threads (default: the count the run trained with)"


@dataclass
class Train:
    """`tfamily train`: where the run's settings come from."""
    overrides: list[str] = setting([], positional="KEY=VALUE", help="e.g. model.d_model=256 data.corpus=kjv")
    config: str | None = setting(None, flag=("-c", "--config"),
                                 help="a config file, or a packaged config by name (tiny, demo, copy, ...)")
    resume: str | None = setting(None, flag=True, metavar="DIR", help="continue the run (or checkpoint) in DIR exactly")
    data_dir: str | None = setting(None, flag=True, metavar="DIR", help=DATA_DIR)
    json: bool = setting(False, flag=True, help=JSON)
    debug: bool = setting(False, flag=True, help=DEBUG)


@dataclass
class Eval:
    """`tfamily eval DIR`."""
    checkpoint: str = setting(None, positional="DIR", help="run directory or checkpoint directory")
    data: str | None = setting(None, flag=True, metavar="CORPUS|FILE|DIR",
                               help="score this instead of the run's own corpus, with the run's vocabulary: a corpus "
                                    "name, a text file, a labelled CSV/JSONL (a classifier) or a `tfamily data "
                                    "prepare` folder (a converted checkpoint has no corpus of its own)")
    split: str = setting("val", flag=True, choices=("val", "test"))
    max_tokens: int | None = setting(None, flag=True, lo=1, help="score at most this many tokens (default: the whole split)")
    batch_size: int | None = setting(None, flag=True, lo=1)
    mem_len: int | None = setting(None, flag=True, lo=0, help="memory models: evaluate with this memory length "
                                                             "(longer than in training works: Transformer-XL, section 3.2)")
    precision: str = setting("auto", flag=True, choices=PRECISIONS, help="auto (default): the precision the run "
                             "trained in, so the numbers match its own evaluation")
    device: str = setting("auto", flag=True)
    threads: int | None = setting(None, flag=True, lo=1, metavar="N", help=THREADS)
    data_dir: str | None = setting(None, flag=True, metavar="DIR", help=DATA_DIR)
    json: bool = setting(False, flag=True, help=JSON)
    debug: bool = setting(False, flag=True, help=DEBUG)


@dataclass
class Generate:
    """`tfamily generate DIR`."""
    checkpoint: str = setting(None, positional="DIR", help="run directory or checkpoint directory")
    prompt: list[str] | None = setting(None, flag=True, repeat=True, metavar="TEXT",
                                       help="text to continue (default: a new line); repeat for a batch, printed "
                                            "when done")
    tokens: int = setting(500, flag=True, help="how many tokens to generate (at most 1000000 per call; write longer "
                                               "text in parts)")
    stop: list[str] = setting([], flag=True, repeat=True, metavar="STR",
                              help="end a prompt's text where it reaches STR (left out); \\n, \\t and \\\\ are a "
                                   "newline, a tab and a backslash, as in --stop '\\n\\n'; repeatable")
    # checked by train/sample.py, as when the library is called
    temperature: float = setting(0.8, flag=True, check=False)
    top_k: int | None = setting(None, flag=True, check=False)
    top_p: float | None = setting(None, flag=True, check=False)
    greedy: bool = setting(False, flag=True, help="argmax decoding")
    seed: int = setting(0, flag=True)
    device: str = setting("auto", flag=True)
    threads: int | None = setting(None, flag=True, lo=1, metavar="N", help=THREADS)
    debug: bool = setting(False, flag=True, help=argparse.SUPPRESS)


@dataclass
class Predict:
    """`tfamily predict DIR` (a classifier's labels)."""
    checkpoint: str = setting(None, positional="DIR", help="run directory or checkpoint directory of a classifier")
    text: list[str] | None = setting(None, flag=True, metavar="T", help="texts to label (one or more)")
    file: str | None = setting(None, flag=True, metavar="F",
                               help="texts to label: one per line, or a CSV/JSONL's text column")
    batch_size: int = setting(64, flag=True, lo=1, help="texts per forward pass")
    device: str = setting("auto", flag=True)
    threads: int | None = setting(None, flag=True, lo=1, metavar="N", help=THREADS)
    json: bool = setting(False, flag=True, help="print one JSON object: each text's label and probabilities")
    debug: bool = setting(False, flag=True, help=DEBUG)


@dataclass
class Demo:
    """`tfamily demo`."""
    overrides: list[str] = setting([], positional="KEY=VALUE", help="overrides of the demo config")
    config: str = setting("demo", flag=("-c", "--config"),
                          help="config (default: demo, the packaged tfamily/configs/demo.yaml)")
    time: str = setting("5m", flag=True, old=("--time-budget",), metavar="DUR",
                        help="the whole demo's wall time, training plus evaluation and sample (default 5m)")
    out: str | None = setting(None, flag=True, metavar="DIR", help="run directory (default runs/demo/<time>)")
    sample_tokens: int = setting(500, flag=True)
    seed: int | None = setting(None, flag=True, help="default: the config's (0)")
    device: str | None = setting(None, flag=True, help="auto (default), cpu, cuda or cuda:N")
    data_dir: str | None = setting(None, flag=True, metavar="DIR", help=DATA_DIR)
    json: bool = setting(False, flag=True, help=JSON)
    debug: bool = setting(False, flag=True, help=DEBUG)


FORMAT_NAMES = ("onnx", "torchscript", "pt2")  # tfamily.export.graphs.FORMATS; tests/test_export.py checks both agree


@dataclass
class Export:
    """`tfamily export RUN --format F --out PATH`."""
    run: str = setting(None, positional="RUN", help="a run directory (or one checkpoint directory) of tfamily train")
    format: str = setting(None, flag=True, required=True, metavar="FORMAT",
                          help=f"one of {', '.join(FORMAT_NAMES)}, hf")
    out: str = setting(None, flag=True, required=True, metavar="PATH",
                       help="the file to write (its directory must exist); for hf, a new directory (parents "
                            "created); never inside a run's checkpoints/")
    force: bool = setting(False, flag=True, help="replace an existing --out (for hf, a directory of files)")
    json: bool = setting(False, flag=True, help="print the summary as JSON")


DTYPES = ("fp32", "bf16")  # the precisions `tfamily convert` writes weights in


@dataclass
class Convert:
    """`tfamily convert DIR --out OUT`."""
    checkpoint: str = setting(None, positional="DIR", help="the directory save_pretrained wrote")
    out: str = setting(None, flag=True, required=True, metavar="OUT",
                       help="the tfamily run directory to write (must not exist)")
    dtype: str = setting("fp32", flag=True, choices=DTYPES, help="the weights' precision in the run")
    corpus: str | None = setting(None, flag=True, help="the corpus (a name or a text file) `tfamily eval` scores "
                                                     "unless given --data (default: none; eval then asks for --data)")
    seq_len: int | None = setting(None, flag=True, lo=1,
                                  help="context length for eval and generate (default: the model's, at most 1024)")
    debug: bool = setting(False, flag=True, help=DEBUG)


@dataclass
class Compare:
    """`tfamily compare RUN...` (and `tfamily plot curves`): the run list and the figure."""
    runs: list[str] = setting([], positional="RUN", nargs="+", help="run directories (each with result.json)")
    out: str = setting("runs/compare.png", flag=True, metavar="PNG", help="the curves' figure")
    bpc: bool = setting(False, flag=True,
                        help="plot validation bits per character instead of the train and validation loss")


@dataclass
class CompareTable:
    """`tfamily compare`'s own flag beside the run list and the figure."""
    json: bool = setting(False, flag=True, help="print the table and the plot's path as JSON")
