"""Checkpoints: safetensors + JSON, written atomically, never unpickled.

A checkpoint is a directory ``<run>/checkpoints/step-<8 digits>/`` holding

- ``model.safetensors``: the weights (tied weights stored once);
- ``<name>.safetensors`` for each extra tensor group (optimiser moments, RNG
  states, carried model state);
- ``meta.json``, written last: its ``format_version`` (``versions.py``), step, spec,
  config, vocabulary, scheduler, data position, the non-tensor parts of the optimiser
  and RNG, and the size and SHA-256 of every other file.

Atomicity: everything is written into ``.tmp-step-...`` beside the final
name, each file fsync'ed, then the directory is renamed into place and the
parent fsync'ed. A reader only considers ``step-*`` directories whose
``meta.json`` parses and whose files match its sizes and hashes, so a run
killed mid-write leaves a ``.tmp-*`` directory that is never loaded (and is
removed when the run resumes).
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ..base import interrupt
from ..base.files import fsync_path, replace_dir, same_mode, sha256
from ..base.textload import load_json, read_text
from .versions import FORMAT_VERSION, VersionError, upgrade

FORMAT = 1
META = "meta.json"
META_BYTES = 256 << 20  # a meta.json holds the run's vocabulary: a large tokenizer.json is tens of MB
TOKENIZER = "tokenizer.json"  # a subword vocabulary, also in meta.json
_STEP_DIR = re.compile(r"^step-(\d{8,})$")


class CheckpointError(ValueError):
    """A checkpoint directory is missing, incomplete or corrupt."""


# -- files -------------------------------------------------------------------------------------
def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """Complete-looking checkpoint directories under ``root``, newest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return sorted(found, reverse=True)


def resumable(run_dir: Callable[[], Path], command: str):
    """A block in which a Ctrl-C becomes ``interrupt.Interrupted`` naming the newest checkpoint of
    ``run_dir()`` (a callable: the directory may be known only once the block ran) and ``command DIR``,
    the command that continues from it; a second Ctrl-C's exit names them too."""
    def hint() -> str:
        where = run_dir()
        found = step_dirs(where / "checkpoints")
        if found:
            return f"the last checkpoint is step {found[0][0]} in {where}; continue with `{command} {where}`"
        return f"no checkpoint was written yet in {where}; run the same command again to start over"
    return interrupt.hinted(hint)


def clean_stale(root: Path) -> list[Path]:
    """Remove half-written (.tmp-*) and half-deleted (.del-*) directories left by a killed run."""
    removed = []
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".tmp-", ".del-")):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def _tie_key(t: Tensor) -> tuple:
    return (t.device, t.data_ptr(), t.dtype, tuple(t.shape), t.stride())


def model_tensors(model: nn.Module) -> dict[str, Tensor]:
    """The model's state as safetensors can hold it: a tied tensor (several names, one tensor) once,
    under its first name, and every tensor a compact copy of its own. Written here rather than by
    ``safetensors.torch.save_model``, which refuses tensors that are views into part of one buffer,
    as cuDNN packs an RNN's weights on CUDA (every LSTM/GRU model failed to checkpoint there)."""
    out, seen = {}, set()
    for name, t in model.state_dict().items():
        key = _tie_key(t)
        if key in seen:
            continue
        seen.add(key)
        t = t.detach()
        own = t.is_contiguous() and t.untyped_storage().nbytes() == t.numel() * t.element_size()
        out[name] = t.cpu().contiguous() if own else t.cpu().clone(memory_format=torch.contiguous_format)
    return out


def _tied_elsewhere(model: nn.Module, names: set[str]) -> set[str]:
    """Of the model's state names missing from a file, those tied to a name the file holds."""
    groups: dict[tuple, list[str]] = {}
    for name, t in model.state_dict().items():
        groups.setdefault(_tie_key(t), []).append(name)
    return {n for g in groups.values() if len(g) > 1 and any(m in names for m in g) for n in g}


def write(root: Path, step: int, model: nn.Module | dict[str, Tensor], groups: dict[str, dict[str, Tensor]],
          meta: dict, keep: int, on_save: Callable[[int, str], None] | None = None) -> Path:
    """Write checkpoint ``step`` under ``root`` atomically; keep the newest ``keep``. ``model``: the
    module, or its tensors as ``model_tensors`` gives them (a sharded model's, gathered first).
    ``on_save(step, phase)``: told at 'begin' (nothing written yet) and 'files' (the tensors written,
    ``meta.json`` not yet), e.g. the tests' kill points (``callbacks.SeesSaves``)."""
    root.mkdir(parents=True, exist_ok=True)
    weights = model if isinstance(model, dict) else model_tensors(model)
    with interrupt.deferred():  # Ctrl-C waits for the write (a few seconds at most: base/interrupt.py)
        try:
            path = _write(root, step, weights, groups, meta, keep, on_save or _quiet)
            if (path / TOKENIZER).is_file():  # the run's, beside checkpoints/
                shutil.copyfile(path / TOKENIZER, root.parent / TOKENIZER)
            return path
        except (OSError, SafetensorError) as e:
            shutil.rmtree(root / f".tmp-step-{step:08d}-{os.getpid()}", ignore_errors=True)
            if disk_full(e):
                raise _no_room(root, step, weights, groups) from e
            raise


def disk_full(e: BaseException) -> bool:
    return (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)
            or "No space left on device" in str(e) or "Disk quota exceeded" in str(e))


def _no_room(root: Path, step: int, weights: dict, groups: dict) -> OSError:
    """The one-line answer to a full disk: what the checkpoint needs, what is free, what is kept."""
    need = sum(t.numel() * t.element_size() for g in (weights, *groups.values()) for t in g.values()) + (1 << 20)
    try:
        free = f"{shutil.disk_usage(root).free / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    kept = step_dirs(root)
    last = f"the last good checkpoint {kept[0][1].name} is intact" if kept else "no earlier checkpoint exists"
    return OSError(errno.ENOSPC, f"No space left on device in {root} for checkpoint step-{step:08d}: it needs "
                                 f"about {need / 2**20:.1f} MiB ({free}); {last}")


def _quiet(step: int, phase: str) -> None:
    pass


def _write(root: Path, step: int, weights: dict, groups: dict, meta: dict, keep: int,
           on_save: Callable[[int, str], None]) -> Path:
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    on_save(step, "begin")
    files = {}
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    files["model.safetensors"] = None
    for name, tensors in groups.items():
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / f"{name}.safetensors"))
        files[f"{name}.safetensors"] = None
    vocab = meta.get("vocab")
    if isinstance(vocab, dict) and vocab.get("type") == "tokenizer":  # a copy of meta.json's, for transformers
        (tmp / TOKENIZER).write_text(vocab["json"], encoding="utf-8")
    on_save(step, "files")
    for fname in files:
        fsync_path(tmp / fname)
        files[fname] = {"bytes": (tmp / fname).stat().st_size, "sha256": sha256(tmp / fname)}
    full = {"format": FORMAT, "format_version": FORMAT_VERSION, "step": step, "files": files, **meta}
    with open(tmp / META, "w", encoding="utf-8") as f:
        json.dump(full, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    same_mode(tmp / META, [tmp / fname for fname in files])
    replace_dir(tmp, final)  # the same step saved again (a resumed run's last step) replaces it
    for _, old in step_dirs(root)[keep:]:
        # Rename first: a directory that is half deleted must not look like a checkpoint.
        doomed = root / f".del-{old.name}-{os.getpid()}"
        old.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return final


# What a training run's checkpoint holds besides format/step/files (``Trainer.save``);
# ``load`` refuses a meta.json without them instead of failing later with a KeyError.
RUN_KEYS = ("spec", "config", "source", "vocab", "metrics", "tokens", "elapsed", "world_size", "scheduler",
            "optimizer", "rng", "data")
# What a reader takes from inside each section (sample.py, snapshot.py, rl/train.py): a section
# edited down to {} or to another type is refused here, in one line, not as a KeyError later.
_SECTIONS = {"source": (dict, ("name", "kind", "seq_len", "unit")), "metrics": (dict, ("train_loss", "val")),
             "config": (dict, ("train", "data")), "scheduler": (dict, ()), "rng": (dict, ("numpy", "python")),
             "data": (dict, ()), "tokens": (int, ()), "elapsed": ((int, float), ()), "world_size": (int, ())}


def _check_sections(path: Path, meta: dict, require: tuple) -> None:
    for key in require:
        kind, inner = _SECTIONS.get(key, (None, ()))
        if kind is None:
            continue
        v = meta[key]
        if isinstance(v, bool) or not isinstance(v, kind):
            raise CheckpointError(f"{path / META}: {key!r} is {str(v)[:60]!r}, not the "
                                  f"{'mapping' if kind is dict else 'number'} tfamily writes; the checkpoint is "
                                  f"corrupt or was edited")
        lacking = [k for k in inner if k not in v]
        if lacking:
            raise CheckpointError(f"{path / META}: section {key!r} lacks {lacking}; the checkpoint is corrupt or "
                                  f"was edited")


_FILE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*\.safetensors$")


def _check_files(path: Path, files) -> None:
    """Every listed file is a plain ``*.safetensors`` name inside ``path`` (a meta.json naming
    '../x' or '/etc/passwd' would make the reader hash or load a file outside the checkpoint)."""
    if not isinstance(files, dict) or "model.safetensors" not in files:
        raise CheckpointError(f"{path / META} has no valid 'files' table (with model.safetensors); "
                              f"the checkpoint is corrupt")
    for fname, info in files.items():
        if not isinstance(fname, str) or not _FILE_NAME.fullmatch(fname):
            raise CheckpointError(f"{path / META} lists file {fname!r}, which is not a plain *.safetensors "
                                  f"name inside the checkpoint directory; refusing to read it")
        if not (isinstance(info, dict) and isinstance(info.get("bytes"), int)
                and isinstance(info.get("sha256"), str)):
            raise CheckpointError(f"{path / META}: entry {fname!r} lacks its size or SHA-256; the checkpoint "
                                  f"is corrupt")


def _check_header(f: Path) -> None:
    """The safetensors header (8-byte little-endian length, then JSON) parses: a corrupt
    header is found here, where ``resolve`` can still fall back to an older checkpoint."""
    try:
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if not 2 <= n <= min(f.stat().st_size - 8, 100 << 20):
                raise ValueError(f"header length {n}")
            header = json.loads(fh.read(n))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: a header nested 10^5 deep
        raise CheckpointError(f"{f} has a corrupt safetensors header ({e}); the checkpoint is corrupt") from e


def read_meta(path: Path, verify: bool = True, require: tuple = ()) -> dict:
    """``meta.json`` of checkpoint ``path``, after checking every file it lists and that it
    has the keys in ``require``."""
    path = Path(path)
    try:
        meta = load_json(read_text(path / META, META_BYTES), str(path / META), META_BYTES)
    except FileNotFoundError as e:
        raise CheckpointError(f"{path} is not a complete checkpoint (no {META})") from e
    except ValueError as e:  # not JSON, not UTF-8, or nested past any meta.json tfamily writes
        raise CheckpointError(f"{path / META} is corrupt ({e})") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} has checkpoint format {meta.get('format') if isinstance(meta, dict) else '?'}"
                              f"; this tfamily reads format {FORMAT}")
    try:
        meta = upgrade(meta, str(path / META))
    except VersionError as e:
        raise CheckpointError(str(e)) from e
    missing = [k for k in ("step", *require) if k not in meta]
    if missing:
        raise CheckpointError(f"{path / META} lacks {missing}; the checkpoint is corrupt or was not written "
                              f"by `tfamily train`")
    if isinstance(meta["step"], bool) or not isinstance(meta["step"], int) or meta["step"] < 0:
        raise CheckpointError(f"{path / META} has step {meta['step']!r}; the checkpoint is corrupt")
    _check_sections(path, meta, require)
    _check_files(path, meta.get("files"))
    if verify and meta.get("vocab") is not None:  # a corrupt tokenizer skips the checkpoint like a corrupt file
        from ..data import vocab_from_json
        try:
            size = vocab_from_json(meta["vocab"]).size
        except (ValueError, TypeError, KeyError) as e:
            raise CheckpointError(f"{path / META}: its vocabulary cannot be read ({str(e)[:160]}); the "
                                  f"checkpoint is corrupt") from e
        rows = (meta.get("spec") or {}).get("vocab_size")
        if isinstance(rows, int) and size > rows:  # fewer is fine: padded embedding tables
            raise CheckpointError(f"{path / META}: its vocabulary has {size} tokens, more than the model's {rows} "
                                  f"embedding rows, so its ids do not mean what the model learned; the checkpoint "
                                  f"is corrupt: restore the meta.json the run wrote")
    for fname, info in meta["files"].items():
        f = path / fname
        if not f.is_file() or f.stat().st_size != info["bytes"]:
            raise CheckpointError(f"{f} is missing or truncated; the checkpoint is incomplete")
        if verify and sha256(f) != info["sha256"]:
            raise CheckpointError(f"{f} does not match its recorded SHA-256; the checkpoint is corrupt")
        _check_header(f)
    return meta


def resolve(path: str | Path, require: tuple = ()) -> Path:
    """The checkpoint to load from ``path``: a checkpoint directory itself, or the newest
    valid one under a run directory (``<run>/checkpoints``) or a checkpoints directory
    (an invalid newer one is skipped, saying so on stderr)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"checkpoint or run directory {path} does not exist")
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file; pass a run directory or a checkpoint directory")
    if (path / META).is_file():
        read_meta(path, require=require)
        return path
    errors = []
    for root in (path / "checkpoints", path):
        for _, d in step_dirs(root):
            try:
                read_meta(d, require=require)
                return d
            except CheckpointError as e:
                errors.append(str(e))
                print(f"tfamily: skipping {d}: {e}", file=sys.stderr)
    detail = f" ({'; '.join(errors)})" if errors else ""
    raise FileNotFoundError(f"no complete checkpoint under {path}{detail}; pass a run directory "
                            f"(with checkpoints/step-*) or a checkpoint directory (with {META})")


@dataclass
class Loaded:
    path: Path
    meta: dict

    def group(self, name: str) -> dict[str, Tensor]:
        f = self.path / f"{name}.safetensors"
        if not f.is_file():
            return {}
        try:
            return load_file(str(f))
        except SafetensorError as e:
            raise CheckpointError(f"{f} cannot be read ({e}); the checkpoint is corrupt") from e

    def load_weights(self, model: nn.Module, device: torch.device | str = "cpu", load=None) -> None:
        """``load``: the model's ``load_state_dict`` unless given (a sharded model's, which
        takes the whole state on every rank)."""
        f = self.path / "model.safetensors"
        try:
            state = load_file(str(f), device=str(device))
            renames = self.meta.get("renames") or {}  # set by an upgrade of an older format_version
            state = {renames.get(k, k): v for k, v in state.items()}
            missing, unexpected = (load or model.load_state_dict)(state, strict=False)
            missing = set(missing) - _tied_elsewhere(model, set(state))
        except SafetensorError as e:
            raise CheckpointError(f"{f} cannot be read ({e}); the checkpoint is corrupt") from e
        except RuntimeError as e:  # load_state_dict: a tensor of another shape
            detail = " ".join(str(e).split())[:300]
            raise CheckpointError(f"{self.path} does not fit this model ({detail}); its weights do not match "
                                  f"the spec in its {META}") from e
        if missing or unexpected:
            raise CheckpointError(f"{self.path} does not fit this model: missing {sorted(missing)[:5]}, "
                                  f"unexpected {sorted(unexpected)[:5]}")


def load(path: str | Path, require: tuple = RUN_KEYS) -> Loaded:
    """The checkpoint at ``path`` (see ``resolve``); ``require``: the meta keys it must have
    (a training run's by default)."""
    ckpt = resolve(path, require)
    return Loaded(ckpt, read_meta(ckpt, verify=False, require=require))
