"""`tfamily data prepare` throughput (byte, char, BPE against `Tokenizer.encode_batch` on the same text,
the JSONL / CSV / Parquet readers), and the anonymous memory and start-up time of `tfamily train` on
prepared BPE corpora of two sizes.

Every corpus is generated here (documents of paragraphs drawn, seeded, from the data directory's
kjv.txt, tinyshakespeare.txt and gcide.txt.gz) under ``--work``, never in the repository. Throughput
is timed with the source in the page cache (read once first). The train rows run ``tfamily train`` in a
child process and read its ``RssAnon`` every 20 ms (mapped corpus pages count in plain RSS, not there),
and the time from launch to the first row of ``train.csv`` (``train.log_every=1``).
"""
from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..settings.schema import add_flags, setting

GROUPS = ("text", "bpe", "readers", "train")
FIELDS = ["row", "vocab", "source", "mb", "seconds", "mb_per_s", "baseline", "baseline_mb_per_s", "ratio",
          "rss_anon_peak_mb", "first_step_s", "steps", "load_1min", "cpu", "cores"]


@dataclass
class Settings:
    """`tfamily bench data-prepare`."""
    work: str = setting(str(Path(tempfile.gettempdir()) / "tfamily-bench-data"), flag=True,
                        help="where the generated corpora and prepared folders go (never the repository)")
    text_mb: int = setting(400, flag=True, lo=0, help="MB of plain text for the byte and char rows")
    bpe_mb: int = setting(100, flag=True, lo=0, help="MB of plain text for the BPE row")
    bpe_size: int = setting(4096, flag=True, lo=0)
    reader_mb: int = setting(50, flag=True, lo=0, help="MB of documents as JSONL, CSV and Parquet")
    train_mb: list[int] = setting([100, 2000], flag=True, nargs="*", help="sizes (MB) of the prepared BPE corpora "
                                  "`tfamily train` runs on; none: skip the train rows")
    steps: int = setting(1000, flag=True, lo=0, help="training steps of each train row")
    data_dir: str | None = setting(None, flag=True)
    out: str = setting("runs/bench/data_prepare", flag=True, help="directory for data_prepare.json/.csv/.png")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")
    rounds: int = setting(2, flag=True, lo=1, help="alternating rounds of the BPE row (the best of each kept)")
    only: list[str] = setting(list(GROUPS), flag=True, choices=None,
                              help=f"the row groups to run, of {', '.join(GROUPS)}; the others' rows in --out are kept")


def add_args(p) -> None:
    add_flags(p, Settings)


def _paragraphs(data_dir) -> list[str]:
    from ..data.paths import find_file
    texts = [find_file(n, data_dir).read_text("utf-8") for n in ("kjv.txt", "tinyshakespeare.txt")]
    texts.append(gzip.open(find_file("gcide.txt.gz", data_dir)).read().decode("latin-1"))  # not all UTF-8
    return [p for t in texts for p in t.split("\n\n") if p.strip()]


def _documents(paragraphs: list[str], mb: float, seed: int = 0):
    """Documents of 1-30 paragraphs drawn with ``seed``, about ``mb`` MB in all."""
    rng, n = random.Random(seed), 0
    while n < mb * 1e6:
        doc = "\n\n".join(rng.choices(paragraphs, k=rng.randint(1, 30)))
        n += len(doc.encode("utf-8")) + 2
        yield doc


def _text_file(work: Path, paragraphs, mb: int) -> Path:
    path = work / f"text-{mb}mb.txt"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for doc in _documents(paragraphs, mb):
                f.write(doc + "\n\n")
        tmp.rename(path)
    return path


def _structured(work: Path, paragraphs, mb: int) -> dict[str, Path]:
    import csv
    docs = list(_documents(paragraphs, mb, seed=1))
    paths = {k: work / f"docs-{mb}mb.{k}" for k in ("jsonl", "csv", "parquet")}
    if not paths["jsonl"].exists():
        with open(paths["jsonl"], "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"id": len(d), "text": d}) + "\n")
    if not paths["csv"].exists():
        with open(paths["csv"], "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "text"])
            w.writerows([len(d), d] for d in docs)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
        if not paths["parquet"].exists():
            pq.write_table(pa.table({"id": [len(d) for d in docs], "text": docs}), paths["parquet"])
    except ImportError:
        del paths["parquet"]
    return paths


def _warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def _prepare(src: Path, vocab: str, out: Path) -> float:
    from ..data.prepare import PrepareSettings, prepare
    _warm(src)
    shutil.rmtree(out, ignore_errors=True)  # a second prepare of the same settings would find it done
    start = time.perf_counter()
    prepare(PrepareSettings(sources=[str(src)], vocab=vocab, out=str(out), force=True, progress=False,
                            bpe_sample_mb=100))
    return time.perf_counter() - start


def _encode_batch(src: Path, tok_path: Path) -> tuple[float, float]:
    """Seconds of ``Tokenizer.encode_batch`` and ``encode_batch_fast`` (ids kept) over the text of ``src`` in
    the pieces and batches prepare uses."""
    from tokenizers import Tokenizer

    from ..data import subword
    from ..data.shards import BATCH_CHARS
    text = src.read_text("utf-8")
    pieces, batches, n = subword._chunks(text), [[]], 0
    for p in pieces:
        batches[-1].append(p)
        n += len(p)
        if n >= BATCH_CHARS:
            batches.append([])
            n = 0
    times = []
    for name in ("encode_batch", "encode_batch_fast"):
        fn = getattr(Tokenizer.from_file(str(tok_path)), name)  # a fresh tokenizer each: no cache warmed by the other
        start = time.perf_counter()
        for b in batches:
            _ = [e.ids for e in fn(b, add_special_tokens=False)]
        times.append(time.perf_counter() - start)
    return times[0], times[1]


def _train(corpus: Path, run: Path, steps: int) -> tuple[float, float]:
    """(peak RssAnon MiB, seconds from launch to the first logged step) of `tfamily train` on ``corpus``."""
    argv = [sys.executable, "-m", "tfamily.cli", "train", "member=gpt", "model.d_model=64", "model.heads.n_heads=2",
            "model.depth.n_layers=2", "model.position.max_len=128", "data.seq_len=128", "train.batch_size=8",
            "train.eval_tokens=4096", "train.progress=false", "train.tensorboard=false", "train.log_every=1",
            "train.threads=1", "train.precision=fp32",  # no calibration or precision probe in the timed start
            f"data.corpus={corpus}", "--steps", str(steps), "--out", str(run)]
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, first, log = 0.0, None, run / "train.csv"
    while child.poll() is None:
        try:
            status = Path(f"/proc/{child.pid}/status").read_text()
            peak = max(peak, int(status.split("RssAnon:")[1].split()[0]) / 1024)
        except (OSError, IndexError):
            pass
        if first is None and log.is_file() and log.read_text().count("\n") >= 2:
            first = time.perf_counter() - start
        time.sleep(0.02)
    if child.returncode:
        raise RuntimeError(f"tfamily train failed: {child.stderr.read().decode()[-2000:]}")
    return peak, first


def _tokenizer(work: Path, text: Path, size: int, row) -> Path:
    """The BPE every BPE row lends: trained once on ``text`` (timed, with an empty cache), kept in ``work``."""
    tok = work / f"tokenizer-{size}.json"
    if not tok.exists():
        from ..data.manifest import read_manifest
        os.environ["XDG_CACHE_HOME"] = str(work / f"cache-{time.time_ns()}")  # an empty BPE cache
        seconds = _prepare(text, f"bpe:{size}", work / "prep-bpe-train")
        mb = text.stat().st_size / 1e6
        row(group="bpe", row="bpe train + prepare", vocab=f"bpe:{size}", source="text", mb=round(mb, 1),
            seconds=round(seconds, 3))
        tok.write_text(read_manifest(work / "prep-bpe-train")["vocab"]["json"])
    return tok


def run(args) -> int:
    from ..base.hardware import cores, cpu_model
    from .results import print_rows, write_rows
    bad = [g for g in args.only if g not in GROUPS]
    if bad:
        raise ValueError(f"--only {' '.join(bad)} is not valid; choose from {', '.join(GROUPS)}")
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    paragraphs = _paragraphs(args.data_dir)
    common = {"cpu": cpu_model(), "cores": cores()}
    old = out / "data_prepare.json"  # rows of the groups not rerun are kept
    rows = [r for r in json.loads(old.read_text()) if r.get("group") not in args.only] if old.exists() else []

    def row(**kw):
        r = {**common, "load_1min": round(os.getloadavg()[0], 2), **kw}
        if r.get("mb") and r.get("seconds"):
            r["mb_per_s"] = round(r["mb"] / r["seconds"], 2)
        rows.append(r)
        print(json.dumps(r), file=sys.stderr)

    if "text" in args.only:
        text = _text_file(work, paragraphs, args.text_mb)
        for vocab in ("byte", "char"):
            row(group="text", row="prepare", vocab=vocab, source="text", mb=round(text.stat().st_size / 1e6, 1),
                seconds=round(_prepare(text, vocab, work / f"prep-{vocab}"), 3))
    bpe_text = _text_file(work, paragraphs, args.bpe_mb)
    bpe_mb, vocab = bpe_text.stat().st_size / 1e6, f"bpe:{args.bpe_size}"
    if "bpe" in args.only or "train" in args.only:
        tok = _tokenizer(work, bpe_text, args.bpe_size, row)
    if "bpe" in args.only:  # alternating, best of --rounds each: the load moves between them
        times = [(_prepare(bpe_text, str(tok), work / "prep-bpe"), *_encode_batch(bpe_text, tok))
                 for _ in range(args.rounds)]
        ours, slow, fast = (min(t[i] for t in times) for i in range(3))
        row(group="bpe", row="prepare", vocab=vocab, source="text", mb=round(bpe_mb, 1), seconds=round(ours, 3),
            baseline="encode_batch", baseline_mb_per_s=round(bpe_mb / slow, 2), ratio=round(slow / ours, 3))
        row(group="bpe", row="baseline", vocab=vocab, source="text", mb=round(bpe_mb, 1), seconds=round(fast, 3),
            baseline="encode_batch_fast (ids only, no offsets)")
    if "readers" in args.only:
        for kind, path in _structured(work, paragraphs, args.reader_mb).items():
            row(group="readers", row="prepare", vocab="byte", source=kind, mb=round(path.stat().st_size / 1e6, 1),
                seconds=round(_prepare(path, "byte", work / f"prep-{kind}"), 3))
    if "train" in args.only:
        for size in args.train_mb:
            src = _text_file(work, paragraphs, size)
            prepared = work / f"prep-bpe-{size}mb"
            if not (prepared / "manifest.json").exists():
                row(group="train", row="prepare", vocab=vocab, source="text", mb=round(src.stat().st_size / 1e6, 1),
                    seconds=round(_prepare(src, str(tok), prepared), 3))
            peak, first = _train(prepared, work / f"run-{size}mb-{time.time_ns()}", args.steps)
            row(group="train", row="train", vocab=vocab, source="prepared", mb=round(src.stat().st_size / 1e6, 1),
                rss_anon_peak_mb=round(peak, 1), first_step_s=round(first, 2), steps=args.steps)
    write_rows(out, "data_prepare", rows, ["group", *FIELDS])
    _plot(rows, out / "data_prepare.png")
    print_rows([r for r in rows if r.get("mb_per_s")], [("row", "row", "<20"), ("vocab", "vocab", "<10"),
                                                        ("source", "source", "<8"), ("mb", "MB", ">8.1f"),
                                                        ("mb_per_s", "MB/s", ">8.1f")], args.json)
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    from ..base.plotting import pyplot, save_figure
    plt = pyplot()
    speed = [r for r in rows if r.get("mb_per_s") and r["row"] in ("prepare", "baseline")]
    train = [r for r in rows if r["row"] == "train"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{r['vocab']} {r['source']}{' (' + r['baseline'].split()[0] + ')' if r['row'] == 'baseline' else ''}"
              f" {r['mb']:.0f}MB" for r in speed]
    axes[0].barh(labels, [r["mb_per_s"] for r in speed])
    axes[0].set_xscale("log")
    axes[0].set_xlabel("MB/s (source bytes)")
    axes[0].set_title("tfamily data prepare")
    if train:
        axes[1].bar([f"{r['mb']:.0f} MB" for r in train], [r["rss_anon_peak_mb"] for r in train])
        axes[1].set_ylabel("peak RssAnon (MiB)")
        axes[1].set_title(f"tfamily train, {train[0]['steps']} steps, prepared BPE corpus")
    save_figure(fig, path, dpi=110)
