"""``tfamily data prepare``: sources (``readers.py``) into a folder of memory-mapped token shards and a
manifest, which training and evaluation read with memory that does not grow with the corpus
(``prepared.py``).

Decisions, each the simplest that keeps bits per character comparable with the in-memory corpus:

- Split: by document, seeded. Document i (a file, a JSONL/CSV/Parquet row, counted in source order,
  empty ones included) goes to validation when ``u < val``, to test when ``u < val + test``, else
  to training, with ``u`` a splitmix64 draw of ``(seed, i)``: a pure function of the index, so the
  split needs no count of the documents and no pass of its own, and the fractions are expected
  shares of the documents. One plain-text file is one document and is cut by position instead,
  as the in-memory corpus cuts a file: the first ``1 - val - test`` of its bytes, then ``val``,
  then the rest, each cut moved back to a character start. Where those cuts fall on the in-memory
  path's (always for BPE, for bytes and characters when no cut falls inside a multi-byte
  character), the splits are the same tokens and give the same bits per character.
- Joins: the documents of a split are joined by one token, counted as one character: a newline for
  byte and character vocabularies and for a BPE trained here (it has no special tokens, as on the
  in-memory path), the tokenizer's end-of-text token for a ``tokenizer.json`` that has one.
- Vocabularies: ``byte``; ``char`` is the characters of the training split (and the newline that
  joins its documents), found in a first pass; a character of validation or test outside it is
  refused by name (use ``byte`` or ``bpe:N``). ``bpe:N`` is trained (``subword.train_bpe``) on a
  seeded sample of the training documents of about ``bpe_sample_mb`` MB, all of them below that.
  A folder (or file) with a ``tokenizer.json``, or a prepared folder, lends its vocabulary.
- Encoding: byte and character ids are table look-ups at memory speed in this process; BPE goes
  through ``Tokenizer.encode_batch`` (its Rust threads use every core) in one process, never forked
  workers: ``tokenizers`` turns its parallelism off in a child forked after the parent used it.
  Pieces follow ``subword.CHUNK``'s rule (about 1M characters, cut after a newline), as on the
  in-memory path, so the same text gives the same tokens.
- Shards: one file per split (``train.bin``...) of the smallest of uint8/uint16/uint32 that holds
  the vocabulary; for subword vocabularies ``val.chars.bin`` and ``test.chars.bin`` (int32) give the
  characters each token stands for (``subword.char_counts``).
- Crash safety: everything is written into ``.NAME.partial`` beside the output and renamed into place
  after the shards are synced and the manifest written, so a manifest never describes missing
  shards; a killed prepare leaves only the partial folder, which the next one removes and restarts.
  Any error removes it too: a failed prepare writes nothing.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import __version__
from ..base.files import replace_dir, sha256, write_atomic
from . import readers, subword
from ..settings.data import PrepareSettings
from .batching import _splitmix64
from .manifest import FORMAT, FORMAT_VERSION, MANIFEST, SPLITS, read_manifest, token_dtype
from .tokenizer import TokenizerVocab, read_tokenizer
from .vocab import ByteVocab, CharVocab

_SAMPLE_SALT = 0x5A4D91E3


def split_of(seed: int, index: int, val: float, test: float) -> int:
    """0 (train), 1 (val) or 2 (test) for document ``index``: a pure function of (seed, index)."""
    u = _splitmix64(_splitmix64(seed) ^ index) / 2.0**64
    return 1 if u < val else 2 if u < val + test else 0


# -- the plan: sources, splits, output ----------------------------------------------------------
@dataclass
class _Plan:
    settings: PrepareSettings
    sources: list
    out: Path
    by_position: bool
    total: int  # source bytes, for the progress bar
    checked: bool = False  # a whole pass has read the sources (their text checked)

    @property
    def partial(self) -> Path:
        return self.out.with_name(f".{self.out.name}.partial")


def _position_ranges(src: readers.Source, val: float, test: float) -> list[tuple[int, int, int]]:
    """(split, start, end) byte ranges of a one-file corpus: the in-memory path's cut
    (``corpora._split`` then ``subword.split_text``: int(n * fraction), moved back to a character start)."""
    n = src.size
    sizes = [int(n * round(1 - val - test, 12)), int(n * val)]
    bounds = [0]
    with open(src.path, "rb") as f:
        for b in np.cumsum(sizes).tolist():
            f.seek(b)
            tail = f.read(4)
            while 0 < b < n and tail and tail[0] & 0xC0 == 0x80:
                b -= 1
                f.seek(b)
                tail = f.read(4)
            bounds.append(b)
    if test == 0:  # two parts: validation takes the rest, as the in-memory (train, val) split does
        return [(0, bounds[0], bounds[1]), (1, bounds[1], n)]
    return [(0, bounds[0], bounds[1]), (1, bounds[1], bounds[2]), (2, bounds[2], n)]


def documents(plan: _Plan, bar=None):
    """(split, piece, starts_document) for every piece of every source, in order; ``bar`` counts bytes.
    The second pass over the sources (after a char or BPE vocabulary's) does not check UTF-8 again."""
    s, check = plan.settings, not plan.checked
    if plan.by_position:
        src = plan.sources[0]
        for split, start, end in _position_ranges(src, s.val, s.test):
            for piece, first, n in readers.read(src, s.column, start, end, check):
                if bar is not None:
                    bar.update(n)
                yield split, piece, first
        return
    index, split = -1, 0
    for src in plan.sources:
        for piece, first, n in readers.read(src, s.column, check=check):
            if bar is not None and n:
                bar.update(n)
            if first:
                index += 1
                split = split_of(s.seed, index, s.val, s.test)
            yield split, piece, first


def _bar(plan: _Plan, desc: str):
    from tqdm import tqdm
    return tqdm(total=plan.total, unit="B", unit_scale=True, unit_divisor=1000, desc=desc, file=sys.stderr,
                disable=not plan.settings.progress, mininterval=0.5, leave=False)


def _text(piece) -> str:
    return piece if isinstance(piece, str) else piece.decode("utf-8")


# -- vocabularies ---------------------------------------------------------------------------------
def _lent_vocab(spec: str):
    """The vocabulary of a prepared folder, a folder with a tokenizer.json, or a tokenizer.json file."""
    p = Path(spec).expanduser()
    if p.is_dir() and (p / MANIFEST).is_file():
        from .vocab import vocab_from_json
        return vocab_from_json(read_manifest(p)["vocab"])
    if p.is_dir() and (p / "tokenizer.json").is_file():
        return read_tokenizer(p / "tokenizer.json")
    if p.is_file() and p.suffix == ".json":
        return read_tokenizer(p)
    if p.exists():
        raise ValueError(f"--vocab {spec} holds no tokenizer.json or manifest.json; pass byte, char, bpe:N, a folder "
                         f"with a tokenizer.json, or a prepared corpus")
    raise ValueError(f"--vocab {spec!r} is not valid; valid: byte, char, bpe:N (e.g. bpe:4096), or a folder with a "
                     f"tokenizer.json or a prepared corpus")


def _char_vocab(plan: _Plan) -> CharVocab:
    """The characters of the training split (with the newline that joins its documents); a character
    of validation or test outside them is refused by name."""
    seen = [set(), set()]  # training, held out
    known = [b"", b""]     # the ASCII bytes already in each set: removed before the rest is looked at
    with _bar(plan, "characters") as bar:
        for split, piece, _ in documents(plan, bar):
            k = int(split > 0)
            if isinstance(piece, bytes):
                rest = piece.translate(None, known[k])
                if rest.isascii():
                    new = set(rest.decode("ascii"))
                else:
                    new = set(rest.decode("utf-8"))
            else:
                new = set(piece)
            if new - seen[k]:
                seen[k] |= new
                known[k] = bytes(sorted(ord(c) for c in seen[k] if ord(c) < 128))
    train = seen[0] | (set() if plan.by_position else {"\n"})
    missing = sorted(seen[1] - train)
    if missing:
        c = missing[0]
        raise ValueError(f"character {c!r} (U+{ord(c):04X}) is in the validation or test split but not in the "
                         f"training split, whose characters are the char vocabulary ({len(missing)} such); use "
                         f"--vocab byte or --vocab bpe:N, or another --seed")
    if not train:
        raise ValueError("the training split has no text; pass sources with some text in them")
    return CharVocab(sorted(train))


def _bpe_vocab(plan: _Plan, size: int) -> tuple[TokenizerVocab, int]:
    """A BPE trained on a seeded sample of the training documents (all of them when they are under
    ``bpe_sample_mb``); returns it and the sample's size in characters."""
    s = plan.settings
    budget = int(s.bpe_sample_mb * 1e6)
    share = min(1.0, budget / max(1, plan.total * (1 - s.val - s.test)))
    parts, n, index, keep = [], 0, -1, True
    with _bar(plan, "BPE sample") as bar:
        for split, piece, first in documents(plan, bar):
            if first or plan.by_position:  # drawn by document; a file cut by position, by piece (~8 MB)
                index += 1
                keep = share >= 1 or _splitmix64(_splitmix64(s.seed ^ _SAMPLE_SALT) ^ index) / 2.0**64 < share
                if first and split == 0 and keep and parts and not plan.by_position:
                    parts.append("\n")
            if split == 0 and keep and n < budget:
                text = _text(piece)
                parts.append(text)
                n += len(text)
            if n >= budget:
                break
    if not parts and share < 1:  # the draw took nothing (a few large pieces): the first training text instead
        for split, piece, _ in documents(plan):
            if split == 0 and n < budget:
                parts.append(_text(piece))
                n += len(parts[-1])
    text = "".join(parts)
    if not text:
        raise ValueError("the training split has no text to train the BPE on; pass sources with some text")
    return subword.train_bpe(text, size), len(text)


def _vocab(plan: _Plan):
    spec = plan.settings.vocab
    if spec == "byte":
        return ByteVocab(), {}
    if spec == "char":
        vocab = _char_vocab(plan)
        plan.checked = True
        return vocab, {}
    size = subword.bpe_size(spec)
    if size:
        vocab, sample = _bpe_vocab(plan, size)
        return vocab, {"bpe_sample_chars": sample}
    return _lent_vocab(spec), {"lent_from": str(Path(spec).expanduser().resolve())}




# -- the whole prepare ----------------------------------------------------------------------------
def prepare(settings: PrepareSettings) -> tuple[Path, dict]:
    """Prepare ``settings.sources`` into ``settings.out``; returns the folder and its manifest. Any
    error leaves nothing behind (see the module docstring); the same settings over unchanged sources
    find the folder already prepared and return it as it is."""
    settings.check()
    out = Path(settings.out).expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; pass a folder to write the prepared corpus into")
    sources = readers.expand(list(settings.sources))
    for src in sources:
        if out.resolve() in src.path.resolve().parents:
            raise ValueError(f"source {src.path} is inside --out {out}; write the prepared corpus elsewhere")
        readers.check(src, settings.column)
    total = sum(s.size for s in sources)
    if total == 0:
        raise ValueError(f"the sources ({', '.join(str(s.path) for s in sources[:3])}) are empty; pass text")
    plan = _Plan(settings, sources, out, len(sources) == 1 and sources[0].kind == "text", total)
    record = _settings_record(settings)
    if _already_prepared(plan, record):
        return out, json.loads((out / MANIFEST).read_text())
    if not subword.bpe_size(settings.vocab) and settings.vocab not in ("byte", "char"):
        _lent_vocab(settings.vocab)  # a bad --vocab is refused before any pass
    for stale in (plan.partial, *out.parent.glob(f".del-{out.name}-*")):  # replace_dir's aside, if a kill left it
        if stale.exists():
            print(f"tfamily data prepare: note: removing {stale}, left by a prepare that was stopped; starting "
                  f"over", file=sys.stderr)
            shutil.rmtree(stale)
    with ThreadPoolExecutor(1) as pool:  # hashlib and file reads release the GIL: the sums run beside the passes
        sums = [pool.submit(sha256, s.path) for s in sources]
        vocab, extra = _vocab(plan)
        plan.partial.mkdir(parents=True)
        try:
            splits, join = _write(plan, vocab)
            manifest = {
                "format": FORMAT, "format_version": FORMAT_VERSION, "tfamily": __version__,
                "tokenizer": _tokenizer_name(settings.vocab, vocab), "vocab": vocab.to_json(), "vocab_size": vocab.size,
                "dtype": token_dtype(vocab.size).name, "join": join,
                "split": {"by": "position" if plan.by_position else "document", "val": settings.val,
                          "test": settings.test, "seed": settings.seed},
                "splits": splits, "settings": record, **extra,
                "sources": [{"path": str(s.path.resolve()), "kind": s.kind, "bytes": s.size,
                             "mtime_ns": s.path.stat().st_mtime_ns, "sha256": f.result()}
                            for s, f in zip(sources, sums)],
            }
            write_atomic(plan.partial / MANIFEST, json.dumps(manifest, indent=1))
            _install(plan)
        except BaseException:
            shutil.rmtree(plan.partial, ignore_errors=True)
            raise
    return out, manifest


def _tokenizer_name(spec: str, vocab) -> str:
    """What the manifest calls the tokenizer: byte, char, bpe:N, or tokenizer.json (a lent one)."""
    if spec in ("byte", "char") or subword.bpe_size(spec):
        return spec
    return "tokenizer.json" if isinstance(vocab, TokenizerVocab) else vocab.name


def _settings_record(s: PrepareSettings) -> dict:
    return {k: v for k, v in dataclasses.asdict(s).items() if k not in ("sources", "out", "force", "progress")}


def _already_prepared(plan: _Plan, record: dict) -> bool:
    """True when ``out`` holds these sources (same sizes and times) prepared with these settings; an
    ``out`` with other contents is refused unless ``--force`` (and never when it is not a prepared corpus)."""
    out = plan.out
    if not out.is_dir() or not any(out.iterdir()):
        return False
    if not (out / MANIFEST).is_file():
        raise ValueError(f"--out {out} is not empty and holds no prepared corpus; pick another --out (nothing there "
                         f"is replaced)")
    old = read_manifest(out)
    same_sources = [(s.get("path"), s.get("bytes"), s.get("mtime_ns")) for s in old.get("sources", [])] == [
        (str(s.path.resolve()), s.size, s.path.stat().st_mtime_ns) for s in plan.sources]
    if same_sources and old.get("settings") == record:
        return True
    if not plan.settings.force:
        what = "settings" if same_sources else "sources"
        raise ValueError(f"--out {out} holds a corpus prepared from other {what} ({old.get('tokenizer')}, "
                         f"{len(old.get('sources', []))} sources); pass --force to replace it, or pick another --out")
    return False


def _write(plan: _Plan, vocab) -> tuple[dict, dict | None]:
    """The encoding pass: every piece into its split's shard. Returns the splits' manifest entries and
    the join (None for a one-file corpus cut by position)."""
    from .shards import BpeEncoder, Shard, TableEncoder, joiner
    subwords = isinstance(vocab, TokenizerVocab)
    dtype = token_dtype(vocab.size)
    s = plan.settings
    names = SPLITS if s.test > 0 else SPLITS[:2]
    shards = [Shard(plan.partial, name, dtype, chars=subwords and name != "train") for name in names]
    join_ids, join_text = joiner(vocab)
    encoder = (BpeEncoder if subwords else TableEncoder)(vocab, shards, join_ids)
    try:
        with _bar(plan, "encoding") as bar:
            for split, piece, first in documents(plan, bar):
                shard = shards[split]
                if first:
                    if not piece:
                        continue  # an empty document: no join either
                    encoder.feed(split, piece, True, shard.docs > 0 and not plan.by_position)
                    shard.docs += 1
                elif piece:
                    encoder.feed(split, piece, False, False)
            encoder.flush()
    finally:  # also on an error: the writes end and the files close before the partial folder goes
        entries = {sh.name: sh.close() for sh in shards}
    for sh in shards:
        if sh.tokens < 2:
            n = sum(x.docs for x in shards)
            kind = "its bytes are" if plan.by_position else f"{n:,} document{'s were' if n != 1 else ' was'}"
            full = {"train": "training", "val": "validation"}.get(sh.name, sh.name)
            raise ValueError(f"the {full} split has {sh.tokens} tokens ({kind} split {1 - s.val - s.test:g} / "
                             f"{s.val:g} / {s.test:g} by --val and --test); pass more text, raise --val / --test, "
                             f"or try another --seed" + (" (one gzip file is one document: decompress it to have it "
                             "cut by position)" if len(plan.sources) == 1 and plan.sources[0].kind == "gzip" else ""))
    join = None if plan.by_position else {"text": join_text, "ids": join_ids.tolist(), "chars": 1}
    return entries | ({} if s.test > 0 else {"test": None}), join


def _install(plan: _Plan) -> None:
    """Move the finished partial folder to ``out``; a replaced one goes aside first and is removed last."""
    replace_dir(plan.partial, plan.out)
