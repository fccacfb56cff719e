"""`tfamily download NAME...` and `tfamily data prepare|verify`: registered by `tfamily.cli` through `add_parser`."""
from __future__ import annotations

import dataclasses
import sys
import time

from . import download as _download


def add_parser(sub) -> None:
    p = sub.add_parser("download", help="download and verify a dataset (tinyshakespeare, enwik8, text8)",
                       description="Fetch datasets, verify their checksums and install them atomically.")
    _download.add_arguments(p)
    p.set_defaults(func=_download.run)
    data = sub.add_parser("data", help="prepare your own text as memory-mapped token shards (data.corpus=DIR), "
                                       "or verify a prepared folder")
    inner = data.add_subparsers(dest="action", metavar="ACTION")
    inner.add_parser("prepare", help="files, folders, globs or JSONL/CSV/Parquet into train/val/test token shards",
                     build=_declare_prepare)
    inner.add_parser("verify", help="check a prepared folder's shards against its manifest's SHA-256 sums",
                     build=_declare_verify)
    data.set_defaults(func=lambda args: data.print_help() or 2)


def _declare_prepare(p) -> None:
    from ..settings.data import PrepareSettings
    from ..settings.schema import add_flags
    add_flags(p, PrepareSettings)
    p.set_defaults(func=_prepare)


def _prepare(args) -> int:
    from ..settings.data import PrepareSettings
    from .prepare import prepare
    names = [f.name for f in dataclasses.fields(PrepareSettings)]
    settings = PrepareSettings(**{n: getattr(args, n) for n in names})
    start = time.perf_counter()
    out, m = prepare(settings)
    took = time.perf_counter() - start
    size = sum(s["bytes"] for s in m["sources"])
    parts = ", ".join(f"{name} {e['tokens']:,} tokens ({e['documents']:,} document{'s' * (e['documents'] != 1)})"
                      for name, e in m["splits"].items() if e is not None)
    print(f"{out}: {m['tokenizer']} ({m['vocab_size']:,} tokens, {m['dtype']}): {parts}; "
          f"{size / 1e6:,.1f} MB in {took:.1f} s ({size / 1e6 / max(took, 1e-9):,.1f} MB/s); train with "
          f"data.corpus={out}", file=sys.stderr)
    print(out)
    return 0


def _declare_verify(p) -> None:
    p.add_argument("folder", metavar="DIR", help="a folder written by `tfamily data prepare`")
    p.set_defaults(func=_verify)


def _verify(args) -> int:
    from .prepared import load_prepared, verify_prepared
    load_prepared(args.folder)  # the manifest and the shards' sizes first
    problems = verify_prepared(args.folder)
    if problems:
        raise ValueError(f"{args.folder}: {'; '.join(problems)}; prepare it again (`tfamily data prepare ... "
                         f"--out {args.folder} --force`)")
    print(f"{args.folder}: every shard matches its manifest", file=sys.stderr)
    return 0
