"""The settings of ``tfamily data prepare`` (``data/prepare.py`` does the work), declared once: the
flags, their help and defaults, and the checks of each value come from these fields (``schema.py``)."""
from __future__ import annotations

from dataclasses import dataclass

from .schema import check, setting


@dataclass(frozen=True)
class PrepareSettings:
    sources: list[str] = setting([], positional="SRC", nargs="+",
                                 help="text files, folders, globs, or JSONL / CSV / Parquet files")
    vocab: str | None = setting(None, flag=True, check=False,
                         help="byte, char, bpe:N (a byte-level BPE of N tokens trained here), or a folder with a "
                              "tokenizer.json or a prepared corpus")
    out: str | None = setting(None, flag=True, check=False, help="the folder to write (shards and manifest.json)")
    column: str = setting("text", flag=True, help="the text column of JSONL / CSV / Parquet sources")
    val: float = setting(0.05, flag=True, lo=0, lo_open=True, hi=1, help="share of documents for validation")
    test: float = setting(0.05, flag=True, lo=0, hi=1, help="share of documents for test (0: test is validation)")
    seed: int = setting(0, flag=True, lo=0, help="seed of the split and of the BPE sample")
    bpe_sample_mb: float = setting(256.0, flag=True, lo=0, lo_open=True,
                                   help="MB of training text the BPE is trained on (a seeded sample of documents)")
    force: bool = setting(False, flag=True, help="replace an --out folder prepared with other settings")
    progress: bool = setting(True, flag=True, negatable=True, help="a progress bar (MB/s and time left)")

    def check(self) -> None:
        """Each value by its declaration, then what spans two: the held-out shares leave training text."""
        for flag, value, example in (("--vocab", self.vocab, "--vocab bpe:4096"), ("--out", self.out, "--out DIR")):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{flag} is required ({example}); see `tfamily data prepare --help`")
        check(self, name=lambda f, key: f"--{key.replace('_', '-')}" if f.name != "sources" else "SRC")
        if self.val + self.test >= 1:
            raise ValueError(f"--val {self.val} and --test {self.test} leave no training text; keep their sum "
                             f"below 1 (e.g. --val 0.05 --test 0.05)")
        if not self.column:
            raise ValueError("--column is empty; name the text column, e.g. --column text")
