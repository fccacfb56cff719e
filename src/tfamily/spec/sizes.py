"""Will it fit? A lower bound on the memory a spec needs, checked before anything is built.

A model too large for the machine otherwise fails deep inside an allocation, minutes and
gigabytes later (10^8 layers of d_model 32 built for 160 s and took 15 GB before failing).
The estimate counts only what must exist, so it refuses nothing that could run:

- parameters: token embedding (and an untied head), per layer the attention projections
  (h d_head d for queries and output, kv d_head d each for keys and values) and the two
  feed-forward matrices (2 d d_ff), learned positions and token types (a recurrent depth: each gate's
  input and recurrent d x d matrices instead); norms, biases and attention readouts are left out;
- per layer, the Python objects of its modules (measured about 42 KiB; 16 KiB counted);
- training: weights, gradients and AdamW's two moments (4 copies of fp32 parameters), and
  per token the residual stream kept for backward at every layer and one fp32 logit row.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..registry import DEPTHS, KERNELS
from . import Spec

LAYER_OBJECT_BYTES = 16 << 10
FP32 = 4


@dataclass(frozen=True)
class Estimate:
    params: int
    weight_bytes: int
    training_bytes: int      # weights + gradients + AdamW moments (0 when not training)
    activation_bytes: int    # 0 when no batch is given

    @property
    def total(self) -> int:
        return max(self.weight_bytes, self.training_bytes) + self.activation_bytes


def param_count(spec: Spec) -> int:
    """A lower bound on the parameter count of ``build(spec)`` (see the module docstring)."""
    d, h, kv, dh = spec.d_model, spec.heads.n_heads, spec.heads.kv_heads, spec.d_head
    attn = 2 * h * dh * d + (1 if spec.heads.shared_qk else 2) * kv * dh * d
    ff = 2 * d * spec.d_ff
    vocab_rows = spec.vocab_size * d * (1 if spec.tie_embeddings else 2)
    n = spec.depth.n_layers
    gates = DEPTHS.entry(spec.depth.name).info.get("gates")  # a recurrent cell's (nn/depth/recurrent.py)
    if gates is not None:  # a recurrent depth: gates x (input and recurrent d x d matrices) per layer
        layers = (n + ((spec.depth.n_enc_layers or n) if spec.model == "encoder_decoder" else 0)) * gates * 2 * d * d
    elif spec.model == "encoder_decoder":
        layers = (spec.depth.n_enc_layers or n) * (attn + ff) + n * (2 * attn + ff)
    else:
        layers = n * (attn + ff)
    position = spec.position.table_len * d
    return vocab_rows + layers + position + spec.token_types * d


def flops_per_unit(spec: Spec | None, params: int, seq_len: int) -> float:
    """Training FLOPs per token of ``spec`` at ``seq_len`` (6 x ``params`` for a model given ready-made):
    the start line's estimate (``train/startup.py``) and the calibration's reference (``train/calibrate.py``)."""
    if spec is None:
        return 6.0 * params
    d = spec.d_model
    n = param_count(spec) - (0 if spec.tie_embeddings else spec.vocab_size * d)
    n -= spec.position.max_len * d if spec.position.name == "learned" else 0
    if DEPTHS.entry(spec.depth.name).info.get("recurrent"):  # no attention: the weights are all
        return 6.0 * n
    layers = spec.depth.n_layers + ((spec.depth.n_enc_layers or spec.depth.n_layers)
                                    if spec.model == "encoder_decoder" else 0)
    keys = seq_len + spec.state.mem_len
    return 6.0 * n + 12.0 * layers * spec.heads.n_heads * spec.d_head * keys


def _layers(spec: Spec) -> int:
    n = spec.depth.n_layers
    return n + ((spec.depth.n_enc_layers or n) if spec.model == "encoder_decoder" else 0)


def mask_bytes(spec: Spec, batch: int, seq_len: int) -> int:
    """What one attention call holds at L x L: the reference kernel's fp32 scores for every row and
    head; SDPA, for a pattern other than causal or full, its boolean mask and the fp32 bias made
    from it (``nn/kernels/sdpa.py``). The sparse kernels (blocksparse, flex, lsh) hold none."""
    if DEPTHS.entry(spec.depth.name).info.get("recurrent"):
        return 0
    patterns = {p.name for p in (spec.pattern.per_layer or (spec.pattern,))}
    square = seq_len * seq_len
    holds = KERNELS.entry(spec.kernel.name).info  # what the kernel's registration says it holds
    if holds.get("scores"):
        return batch * spec.heads.n_heads * square * FP32
    if "mask_unless" in holds and patterns - set(holds["mask_unless"]):
        return square * (1 + FP32)
    return 0


def estimate(spec: Spec, *, batch: int | None = None, seq_len: int | None = None,
             training: bool = False) -> Estimate:
    params = param_count(spec)
    weights = params * FP32 + _layers(spec) * LAYER_OBJECT_BYTES
    acts = 0
    if batch is not None and seq_len is not None:
        tokens = batch * seq_len
        acts = tokens * (spec.d_model * _layers(spec) + spec.vocab_size) * FP32 + mask_bytes(spec, batch, seq_len)
    return Estimate(params, weights, (3 * params * FP32 + weights) if training else 0, acts)


def _cgroup_limit() -> int | None:
    for f in (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


def _swap_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("SwapTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def machine_memory(device: torch.device | str = "cpu") -> tuple[int, str]:
    """(bytes, description) of the memory ``device`` can ever hold: a GPU's total memory,
    or the host's RAM plus swap (capped by a container's cgroup limit)."""
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.total_memory, f"{_fmt(props.total_memory)} on {props.name}"
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no bound known
        return 1 << 62, "unknown"
    swap = _swap_bytes()
    total, what = ram + swap, f"{_fmt(ram)} RAM" + (f" + {_fmt(swap)} swap" if swap else "")
    limit = _cgroup_limit()
    if limit is not None and limit < total:
        return limit, f"a container limit of {_fmt(limit)}"
    return total, what


def _fmt(n: float) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n, i = n / 1024, i + 1
    return f"{n:.1f} {units[i]}" if n < 1e6 else f"{n:.2e} {units[i]}"


fmt_bytes = _fmt  # for the other size checks (rl/train.py)


def check_fits(spec: Spec, *, batch: int | None = None, seq_len: int | None = None, training: bool = False,
               device: torch.device | str = "cpu") -> Estimate:
    """Refuse (ValueError, with the numbers) a spec, batch and length whose lower-bound memory
    exceeds what ``device`` has; returns the estimate otherwise."""
    est = estimate(spec, batch=batch, seq_len=seq_len, training=training)
    have, what = machine_memory(device)
    if est.total <= have:
        return est
    parts = [f"{est.params:.3g} parameters = {_fmt(est.weight_bytes)} of fp32 weights"]
    if training:
        parts.append(f"{_fmt(est.training_bytes)} with gradients and AdamW moments")
    if est.activation_bytes:
        parts.append(f"{_fmt(est.activation_bytes)} of activations for batch {batch} x {seq_len} tokens")
    masks = mask_bytes(spec, batch, seq_len) if batch and seq_len else 0
    if masks:
        parts.append(f"of them {_fmt(masks)} for kernel {spec.kernel.name!r} with pattern {spec.pattern.name!r}, "
                     f"which holds {seq_len} x {seq_len} scores or masks")
    sizes = (f"d_model={spec.d_model}, d_ff={spec.d_ff}, vocab_size={spec.vocab_size}, "
             f"n_layers={spec.depth.n_layers}" + (f", token_types={spec.token_types}" if spec.token_types else "")
             + (f", batch_size={batch}, seq_len={seq_len}" if batch else "")
             + (", or use model.kernel.name=blocksparse (no L x L mask)" if masks else ""))
    raise ValueError(f"this model cannot fit: it needs at least {_fmt(est.total)} ({'; '.join(parts)}) but the "
                     f"machine has {what}; lower some of {sizes}")
