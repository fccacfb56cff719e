"""`tfamily convert DIR --out OUT`: a Hugging Face checkpoint directory as a tfamily run
directory, which `tfamily eval` and `tfamily generate` read like a trained one.

    tfamily convert path/to/gpt2 --out runs/gpt2
    tfamily generate runs/gpt2 --prompt "Hello" --tokens 40 --greedy

The run holds one checkpoint at step 0: the weights, the spec, the tokenizer (from the
directory's tokenizer.json, when there is one) and a config whose data section holds the
context length (``--seq-len``) and, only when ``--corpus`` names one, a corpus for `tfamily eval`;
without it the run has no training corpus and `tfamily eval RUN --data CORPUS` names what to
score. Everything is checked before anything is written.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..base.numbers import check_int
from ..settings.commands import DTYPES, Convert
from ..settings.schema import add_flags

HELP = "import a local Hugging Face checkpoint (config.json + model.safetensors) as a tfamily run directory"


def add_parser(sub) -> None:
    p = sub.add_parser("convert", help=HELP, description=__doc__.split("\n\n")[0])
    add_flags(p, Convert)
    p.set_defaults(func=_convert)


def _convert(args) -> int:
    path = convert(args.checkpoint, args.out, dtype=args.dtype, corpus=args.corpus, seq_len=args.seq_len)
    print(f"wrote {path}")
    return 0


def _corpus(corpus: str | None) -> str | None:
    """``--corpus`` as `tfamily eval` will read it: a known name, or an existing file by its absolute
    path (eval may run from another directory). Checked now: a missing file was written into the
    run and refused only by a later `tfamily eval`."""
    from ..data.corpora import CORPORA
    if corpus is None or corpus in CORPORA:
        return corpus
    path = Path(corpus).expanduser()
    if not path.is_file():
        raise ValueError(f"--corpus {corpus}: " + ("no such file" if not path.exists() else "not a regular file")
                         + f" and not a known corpus ({', '.join(sorted(CORPORA))}); pass one of those names or "
                         f"an existing text file (the corpus `tfamily eval` scores the model on)")
    return str(path.resolve())


def convert(src: str | Path, out: str | Path, *, dtype: str = "fp32", corpus: str | None = None,
            seq_len: int | None = None) -> Path:
    """Write the checkpoint directory ``src`` as the run directory ``out``; returns the checkpoint."""
    import torch

    from ..data.tokenizer import read_tokenizer
    from ..train import checkpoint
    from ..settings.run import Config, DataConfig
    from ..train.rng import capture_rng
    from . import from_pretrained
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    check_int("--seq-len", seq_len, 1, none=True)
    corpus = _corpus(corpus)
    src, out = Path(src).expanduser(), Path(out).expanduser()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"--out {out} exists and is not empty; pick a new directory or remove it")
    model, spec = from_pretrained(src, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    if seq_len is not None and 0 < spec.position.table_len < seq_len:  # a learned table caps the length
        raise ValueError(f"--seq-len {seq_len} is beyond {src / 'config.json'}'s learned position table of "
                         f"{spec.position.max_len} rows; pass --seq-len {spec.position.max_len} or less")
    tok = src / "tokenizer.json"
    vocab = read_tokenizer(tok) if tok.is_file() else None
    if vocab is not None and vocab.size > spec.vocab_size:
        raise ValueError(f"{tok} has {vocab.size} tokens but config.json's vocab_size is {spec.vocab_size}; "
                         f"the tokenizer belongs to another model: copy the matching tokenizer.json")
    if vocab is None:
        print(f"tfamily convert: note: {src} has no tokenizer.json; `tfamily generate` needs one "
              f"(copy it beside config.json and convert again)", file=sys.stderr)
    seq_len = seq_len or min(spec.position.max_len, 1024)
    member = "bert" if spec.model == "encoder" else "gpt"
    rng, rng_meta = capture_rng()  # the sections a run's checkpoint holds, as the trainer writes them
    cfg = Config(member=member, name=out.name, data=DataConfig(corpus=corpus, seq_len=seq_len))
    meta = {"tokens": 0, "elapsed": 0.0, "world_size": 1, "spec": spec.to_dict(), "config": cfg.to_dict(),
            "vocab": vocab.to_json() if vocab is not None else None,
            "source": {"name": f"pretrained:{src.name}", "kind": "text", "seq_len": seq_len, "unit": "tokens"},
            "scheduler": {}, "optimizer": None, "rng": rng_meta, "data": {}, "precision": dtype,
            "metrics": {"train_loss": None, "val": None}, "pretrained": str(src.resolve())}
    return checkpoint.write(out / "checkpoints", 0, model, {"rng": rng}, meta, keep=1)
