"""Using a trained checkpoint: rebuild its model and vocabulary, evaluate, write text."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..build import build
from ..data import vocab_from_json
from ..models.generate import generate
from ..spec import Spec
from . import checkpoint
from .config import from_dict
from .device import resolve_device, resolve_precision
from .evaluate import evaluate
from .resolve import stream
from .tasks import make_task


@dataclass
class Trained:
    model: nn.Module
    spec: Spec
    meta: dict
    vocab: object | None
    path: Path

    @property
    def seq_len(self) -> int:
        return int(self.meta["source"]["seq_len"])


def load_trained(path: str | Path, device: str = "auto") -> Trained:
    """The model of the checkpoint at ``path`` (a run or checkpoint directory), in eval mode."""
    ck = checkpoint.load(path)
    if ck.meta.get("spec") is None:
        raise ValueError(f"{ck.path} holds a model built outside the family (Trainer(model=...)), with no spec "
                         f"to rebuild it from; load its weights into that model with checkpoint.load(...).load_weights")
    spec = Spec.from_dict(ck.meta["spec"])
    dev = resolve_device(device)
    model = build(spec).to(dev)
    ck.load_weights(model, dev)
    model.eval()
    vocab = vocab_from_json(ck.meta["vocab"]) if ck.meta.get("vocab") else None
    return Trained(model, spec, ck.meta, vocab, ck.path)


def run_precision(meta: dict, requested: str, device: torch.device) -> str:
    """The precision to evaluate a run in: ``requested`` unless it is 'auto', in which case the
    precision the run trained and evaluated in (its checkpoint says), so `tfamily eval` reproduces
    the trainer's own numbers on every CPU (the trainer's auto may have picked bf16 on a bf16-native
    CPU, fp32 elsewhere)."""
    if requested == "auto" and meta.get("precision") in ("bf16", "fp16", "fp32"):
        return meta["precision"]
    return resolve_precision(requested, device)


@contextlib.contextmanager
def _run_threads(meta: dict, device: torch.device):
    """Evaluate with the thread count the run used (a different split of a reduction can change
    the last bits); restored afterwards."""
    n = meta.get("threads")
    if device.type != "cpu" or not isinstance(n, int) or n < 1 or n == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def evaluate_trained(tr: Trained, *, split: str = "val", max_tokens: int | None = None, batch_size: int | None = None,
                     precision: str = "auto", data_dir=None, mem_len: int | None = None) -> dict:
    """Evaluate a trained model on ``split`` of the data it was trained on (read from the data
    directory the run used unless ``data_dir`` says otherwise); the metrics are ``<split>_loss``,
    ``<split>_bpc``, ``<split>_ppl`` and ``<split>_acc``."""
    cfg = from_dict(tr.meta["config"])
    data_dir = data_dir if data_dir is not None else tr.meta.get("data_dir")
    cfg.data.eval_split = split
    cfg.data.download = False
    if cfg.data.stream is None:  # a config written without the trainer: the member decides, as in training
        cfg.data.stream, _ = stream(cfg, tr.spec.to_dict())
    dev = next(tr.model.parameters()).device
    task = make_task(cfg.data, cfg.train.batch_size, seed=cfg.train.seed, data_dir=data_dir, vocab=tr.vocab,
                     objective=tr.spec.objective.name)
    t0 = time.perf_counter()
    with _run_threads(tr.meta, dev):
        e = evaluate(tr.model, task.eval_batches(max_tokens, batch_size or cfg.train.eval_batch_size
                                                 or cfg.train.batch_size),
                     device=dev, precision=run_precision(tr.meta, precision, dev), carries=task.carries_state,
                     mem_len=mem_len, metrics=task.eval_metrics)
    wall = time.perf_counter() - t0
    return {"member": cfg.member, "name": cfg.run_name, "params": sum(p.numel() for p in tr.model.parameters()),
            "steps": tr.meta["step"], "tokens": tr.meta["tokens"], "wall_s": wall,
            "tokens_per_s": e["tokens"] / max(wall, 1e-9), "train_loss": tr.meta["metrics"]["train_loss"],
            # named after the split scored, so a test-split number never reads as a validation one
            "split": split, "eval_tokens": e["tokens"], f"{split}_loss": e["loss"], f"{split}_bpc": e.get("bpc"),
            f"{split}_ppl": e["ppl"], f"{split}_acc": e["acc"], "mem_len": mem_len, "checkpoint": str(tr.path)}


def sample_text(tr: Trained, prompt: str, n_tokens: int, *, temperature: float = 0.8, top_k: int | None = None,
                top_p: float | None = None, greedy: bool = False, seed: int = 0, on_text=None) -> str:
    """Continue ``prompt`` by ``n_tokens`` tokens; returns the continuation.

    Context is capped at the training length: when it is full the model restarts
    from the newest half (the KV cache cannot drop its oldest entries, and a
    model attends well only over lengths it was trained on)."""
    if tr.vocab is None:
        raise ValueError(f"{tr.path} was trained on a synthetic task, not text; generate needs a text checkpoint")
    if n_tokens < 0:
        raise ValueError(f"--tokens must be >= 0, got {n_tokens}")
    dev = next(tr.model.parameters()).device
    ids = tr.vocab.encode(prompt) if prompt else torch.zeros(0, dtype=torch.long)
    if len(ids) == 0:
        ids = tr.vocab.encode("\n") if "\n" in getattr(tr.vocab, "chars", "\n") else torch.zeros(1, dtype=torch.long)
    limit = tr.seq_len
    if tr.spec.position.name == "learned":
        limit = min(limit, tr.spec.position.max_len)
    g = torch.Generator(device=dev).manual_seed(seed)
    out: list[int] = []
    context = ids[-limit:].tolist()
    while len(out) < n_tokens:
        room = min(n_tokens - len(out), limit - len(context))
        if room <= 0:
            context = context[-(limit // 2):]
            continue
        seq = generate(tr.model, torch.tensor([context], device=dev), room, greedy=greedy, temperature=temperature,
                       top_k=top_k, top_p=top_p, generator=g,
                       on_token=(lambda t: on_text(tr.vocab.decode(t[0]))) if on_text else None)
        new = seq[0, len(context):].tolist()
        out += new
        context += new
    return tr.vocab.decode(out)
