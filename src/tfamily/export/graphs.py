"""`tfamily export RUN --format onnx|torchscript|pt2 --out PATH`: a trained model as a graph that
runs without tfamily, checked against the eager model before it is kept. ``--format hf --out
DIR`` writes a Hugging Face checkpoint directory instead (``export/hf.py``).

What is exported is the model's forward from token ids to logits, in eval mode: ``tokens``
(b, n) -> ``logits`` (b, n, vocab) for decoders and encoders, ``src`` (b, m) and ``tgt`` (b, n)
-> ``logits`` for encoder-decoders. Batch and sequence lengths are dynamic (pt2 and onnx from
1 up to a learned position table's ``max_len``; torchscript traces sizes as graph values); no
padding mask and no carried state are inputs. Formats:

- ``pt2``: ``torch.export.export`` saved with ``torch.export.save`` (``torch.export.load(p).module()``);
- ``torchscript``: ``torch.jit.trace`` saved with ``torch.jit.save`` (``torch.jit.load``);
- ``onnx``: ``torch.onnx.export`` (the torch.export-based exporter; needs ``pip install
  'tfamily[export]'``), run with onnxruntime.

Which members export where, and why the others do not, is ``refusal``; what an exported graph
leaves out of the eager model (XL memory, the sparse kernels' speed) is ``notes``.
"""
from __future__ import annotations

import contextlib
import errno
import importlib.util
import io
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch
from torch import Tensor, nn

from ..base.numbers import check_int
from ..registry import DEPTHS, KERNELS, STATES
from ..spec import Spec
from ..train.checkpoint import META, disk_full, step_dirs
from ..train.rundir import LOCK

FORMATS = ("onnx", "torchscript", "pt2")
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt", "pt2": ".pt2"}
_ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
# fp32 on CPU: graph rewrites (fused ops, ONNX Runtime's kernels) differ from eager in the last bits.
ATOL = RTOL = 1e-4


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; pick one of {', '.join(FORMATS)}, hf")
    if fmt == "onnx":
        missing = [p for p in _ONNX_PACKAGES if importlib.util.find_spec(p) is None]
        if missing:
            raise ValueError(f"--format onnx needs the packages {', '.join(missing)}; install them with "
                             f"pip install 'tfamily[export]' (or pick --format pt2 or torchscript)")
    return fmt


def check_out(out: str | Path, fmt: str, force: bool = False) -> Path:
    """``out`` as a path that can be written, before anything is loaded or exported: an existing
    file only with ``force``, never inside a run's checkpoints."""
    path = Path(out).expanduser()
    refuse_checkpoints(path)
    if path.is_dir():
        raise IsADirectoryError(f"--out {path} is a directory; name the file to write, e.g. "
                                f"{path / ('model' + SUFFIX[fmt])}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"--out {path}: its directory {path.parent} does not exist; create it or pick "
                                f"another path")
    if path.exists() and not force:
        raise FileExistsError(f"--out {path} exists; pass --force to replace it, or pick another path")
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        raise PermissionError(f"--out {path} cannot be written ({e.strerror or e}); pick a writable "
                              f"directory") from e
    return path


# -- where an export may write, and whether it fits -------------------------------------------------------

def refuse_checkpoints(path: Path) -> None:
    """Refuse ``path`` inside a run's ``checkpoints/`` (or a checkpoint directory): training deletes
    old steps with whatever they hold and any ``.tmp-*`` there, an export's staging directory too
    (train/checkpoint.py)."""
    real = Path(os.path.abspath(path)).resolve()
    for d in (real, *real.parents):
        run_ckpts = d.name == "checkpoints" and ((d.parent / LOCK).is_file() or bool(step_dirs(d)))
        one_ckpt = (d / META).is_file() and any(p == d for _, p in step_dirs(d.parent))
        if run_ckpts or one_ckpt:
            run = d.parent if run_ckpts else d.parent.parent
            raise ValueError(f"--out {path} is inside the checkpoints of run {run} ({d}), which training "
                             f"rotates and cleans; pick a path outside it, e.g. {run / 'export'}")


def tensor_bytes(tensors: Iterable) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def bytes_needed(tensors: int) -> int:
    """What an export of ``tensors`` bytes of weights takes on disk, with room to spare. Every format
    stores each weight once, in full, plus its framing: zip headers and the graph's code (pt2,
    torchscript), the ONNX protobuf, the safetensors header, config.json and tokenizer.json. Measured
    on a 4-layer GPT (d 256, 17.0 MiB of weights): torchscript adds 108 KiB, pt2 223 KiB, hf 5 KiB;
    the graph's share grows with depth, so 10% plus 16 MiB."""
    return int(tensors * 1.1) + (16 << 20)


def free_bytes(where: Path) -> int:
    return shutil.disk_usage(where).free


def no_room(where: Path, need: int, what: str) -> OSError:
    try:
        free = f"{free_bytes(where) / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    return OSError(errno.ENOSPC, f"No space left on device in {where} for {what}: it needs about "
                                 f"{need / 2**20:.1f} MiB ({free}); nothing was written")


@contextlib.contextmanager
def staging(path: Path, need: int, what: str) -> Iterator[Path]:
    """A new directory beside ``path`` (the same file system, so a rename moves it into place) for
    ``what`` of ``need`` bytes, removed on leaving whatever happened; an export moves what it keeps
    out of it first. The space is checked before anything is written; a disk that fills up meanwhile
    gives the same one-line error."""
    if free_bytes(path.parent) < need:
        raise no_room(path.parent, need, what)
    tmp = path.parent / f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()  # the default mode, not mkdtemp's 0700: hf renames this directory into place
    try:
        yield tmp
    except Exception as e:
        if disk_full(e):
            raise no_room(path.parent, need, what) from e
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def refusal(spec: Spec, fmt: str) -> str | None:
    """Why the model of ``spec`` cannot be exported as ``fmt`` (one line), or None if it can."""
    name = spec.member or "this model"
    why = KERNELS.entry(spec.kernel.name).info.get("untraceable")
    if why:
        return f"{name} cannot be exported: {why}; train it with another kernel (kernel.name=sdpa) to export it"
    if DEPTHS.entry(spec.depth.name).info.get("recurrent", False):
        if spec.model == "encoder_decoder":
            return (f"{name} cannot be exported: its recurrent decoder steps through the target one position "
                    f"at a time in Python, so a graph would hold the example's length")
        if fmt != "torchscript":
            return (f"{name} exports as torchscript only: torch.export (behind {fmt}) unrolls torch.nn's "
                    f"{spec.depth.name.upper()} over the example's length; use --format torchscript")
    return None


def notes(spec: Spec) -> list[str]:
    """What the exported graph does differently from the eager model (outputs stay equal)."""
    out = []
    if STATES.entry(spec.state.name).info.get("carried", False):
        out.append(f"state {spec.state.name!r} is not an input: the graph computes one segment from an empty "
                   f"state (the first segment of a stream)")
    # A part whose graph runs differently says so in its registration (``traced_as``).
    out += [reg.entry(name).info["traced_as"] for reg, name in ((KERNELS, spec.kernel.name), (DEPTHS, spec.depth.name))
            if "traced_as" in reg.entry(name).info]
    return out


def max_len(model: nn.Module) -> int | None:
    """The longest sequence the model takes (a learned position table's size), or None."""
    n = getattr(getattr(model, "position", None), "max_len", None)
    return n if isinstance(n, int) else None


def input_names(model: nn.Module) -> tuple[str, ...]:
    return ("src", "tgt") if hasattr(model, "encode") else ("tokens",)


def example(model: nn.Module, batch: int, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, ...]:
    """Random token ids for every input of ``model``: (batch, n) each (src one shorter, so that
    the two lengths differ)."""
    vocab = model.embed.vocab_size
    lengths = (max(1, n - 1), n) if hasattr(model, "encode") else (n,)
    return tuple(torch.randint(0, vocab, (batch, m), generator=generator) for m in lengths)


def _dynamic(model: nn.Module) -> tuple[dict, ...]:
    batch = torch.export.Dim("batch", min=1)
    top = max_len(model)
    seq = {name: torch.export.Dim(f"{name}_len", min=1, **({"max": top} if top else {}))
           for name in input_names(model)}
    return tuple({0: batch, 1: seq[name]} for name in input_names(model))


def _pt2(model: nn.Module, args: tuple, path: Path) -> None:
    program = torch.export.export(model, args, dynamic_shapes=_dynamic(model))
    _through_memory(lambda f: torch.export.save(program, f), path)


def _torchscript(model: nn.Module, args: tuple, path: Path) -> None:
    with warnings.catch_warnings():  # shape-derived Python values; the trace is checked at other shapes
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(model, args, check_trace=False)
    _through_memory(lambda f: torch.jit.save(traced, f), path)


def _through_memory(save: Callable[[io.BytesIO], None], path: Path) -> None:
    """Serialise into memory, then write the file from Python. torch's zip writer aborts the whole
    process (C++ terminate, exit status 134) when the disk fills under it, before any clean-up can
    run; Python's write raises an OSError instead. Costs one copy of the weights in memory."""
    buf = io.BytesIO()
    save(buf)
    with open(path, "wb") as f:
        f.write(buf.getbuffer())


def _onnx(model: nn.Module, args: tuple, path: Path) -> None:
    big = sum(p.numel() * p.element_size() for p in model.parameters()) > 1 << 30  # protobuf's 2 GB cap
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():  # the exporter's progress
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, args, dynamo=True, dynamic_shapes=_dynamic(model),
                                    input_names=list(input_names(model)), output_names=["logits"])
        program.save(str(path), external_data=big)


WRITERS: dict[str, Callable[[nn.Module, tuple, Path], None]] = {"onnx": _onnx, "torchscript": _torchscript,
                                                                 "pt2": _pt2}


def load(path: str | Path, fmt: str) -> Callable[..., Tensor]:
    """The exported model at ``path`` as a function of token-id tensors returning logits."""
    if fmt == "pt2":
        return torch.export.load(str(path)).module()
    if fmt == "torchscript":
        return torch.jit.load(str(path))
    import onnxruntime
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda *ids: torch.from_numpy(session.run(None, {k: t.numpy() for k, t in zip(names, ids)})[0])


def compare(model: nn.Module, run: Callable[..., Tensor], shapes: list[tuple[int, int]], seed: int = 0) -> float:
    """Largest |logit difference| between ``run`` and ``model`` on random tokens of each
    (batch, length) in ``shapes``; raises ValueError if one is beyond ATOL/RTOL."""
    gen, worst = torch.Generator().manual_seed(seed), 0.0
    for b, n in shapes:
        ids = example(model, b, n, gen)
        with torch.no_grad():
            want, got = model(*ids), run(*ids)
        worst = max(worst, float((got - want).abs().max()))
        if not torch.allclose(got, want, atol=ATOL, rtol=RTOL):
            raise ValueError(f"the exported graph's logits differ from the eager model's by {worst:.3g} at "
                             f"batch {b}, length {n}; nothing was written (report this as a bug)")
    return worst


def export(model: nn.Module, fmt: str, out: str | Path, seq_len: int, force: bool = False) -> dict:
    """Export ``model`` (built by ``tfamily.build``, so it carries ``model.spec``) as ``fmt`` to
    ``out`` (an existing file only with ``force``), traced on (2, seq_len) tokens and checked at two
    shapes; returns a summary. The file appears only once it has passed the check; a failure,
    a full disk included, leaves nothing behind."""
    check_format(fmt)
    spec: Spec = model.spec
    reason = refusal(spec, fmt)
    if reason:
        raise ValueError(reason)
    check_int("seq_len (the traced example's length)", seq_len, 1)
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ValueError(f"export a model on the CPU (it is on {device}); call model.cpu() first")
    top = max_len(model)
    n = min(seq_len, top) if top else seq_len
    path = check_out(out, fmt, force)
    model = model.eval()
    need = bytes_needed(tensor_bytes([*model.parameters(), *model.buffers()]))  # each once, tied ones too
    with staging(path, need, f"the {fmt} export {path.name}") as tmp:
        with torch.no_grad():
            WRITERS[fmt](model, example(model, 2, n), tmp / path.name)
        shapes = [(2, n), (3, max(1, n // 2 + 1)), (1, 1)]
        diff = compare(model, load(tmp / path.name, fmt), shapes)
        kept = sorted(tmp.iterdir())  # the model, and its weights file for an ONNX model past 1 GB
        taken = [f.name for f in kept if f.name != path.name and (path.parent / f.name).exists() and not force]
        if taken:
            raise FileExistsError(f"--out {path}: {path.parent / taken[0]}, the model's weights file, exists; "
                                  f"pass --force to replace it, or pick another path")
        for f in kept:
            os.replace(f, path.parent / f.name)
    dynamic = f"batch and sequence length dynamic (1..{top or 'any'})"
    return {"member": spec.member, "format": fmt, "path": str(path), "bytes": path.stat().st_size,
            "inputs": list(input_names(model)), "dynamic": dynamic, "max_abs_diff": diff, "notes": notes(spec)}
