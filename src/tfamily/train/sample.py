"""Using a trained checkpoint: rebuild its model and vocabulary, evaluate, write text (one prompt
or a batch, streamed, with stop strings)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..build import build
from ..data import vocab_from_json
from ..data.vocab import OutsideVocabulary
from ..models.generate import check_left_padding, left_pad
from ..models.generate import stream as stream_tokens
from ..spec import Spec
from ..nn.lora import merge
from ..base.numbers import check_int
from . import checkpoint, finetune
from .config import from_dict
from .device import resolve_device, resolve_precision
from .eval_data import outside, scored_config
from .evaluate import evaluate
from .resolve import stream
from .tasks import make_task


# The most tokens one call writes. The context is capped at the training length anyway (see
# ``stream_text``), so a longer text is the same text written in parts: each part continues the
# end of the one before as its prompt.
MAX_NEW_TOKENS = 1_000_000


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
    if ck.meta.get("spec") is None and "n_envs" in ((ck.meta.get("config") or {}).get("data") or {}).get(
            "task_params", {}):
        raise ValueError(f"{ck.path} is a policy of `tfamily rl train`, not a language model; evaluate it with "
                         f"`tfamily rl eval RUN`")
    if ck.meta.get("spec") is None:
        raise ValueError(f"{ck.path} holds a model built outside the family (Trainer(model=...)), with no spec "
                         f"to rebuild it from; load its weights into that model with checkpoint.load(...).load_weights")
    spec = Spec.from_dict(ck.meta["spec"])
    dev = resolve_device(device)
    model = finetune.for_weights(build(spec), ck.meta).to(dev)  # a LoRA run's adapters, merged once loaded
    ck.load_weights(model, dev)
    merge(model).eval()
    vocab = vocab_from_json(ck.meta["vocab"]) if ck.meta.get("vocab") else None
    return Trained(model, spec, ck.meta, vocab, ck.path)


def run_precision(meta: dict, requested: str, device: torch.device) -> str:
    """The precision to evaluate a run in: ``requested`` unless it is 'auto', in which case the
    precision the run trained and evaluated in (its checkpoint says), so `tfamily eval` reproduces
    the trainer's own numbers on every CPU (the trainer's auto may have picked bf16 on a bf16-native
    CPU, fp32 elsewhere)."""
    if requested in ("auto", "machine") and meta.get("precision") in ("bf16", "fp16", "fp32"):
        return meta["precision"]
    return resolve_precision(requested, device)


@contextlib.contextmanager
def run_threads(meta: dict, device: torch.device, threads: int | None = None):
    """Evaluate or generate with ``threads`` (``--threads N``), else the thread count the run
    trained with: its speed setting for this machine, and the same split of each reduction (another
    split can change the last bits); restored afterwards."""
    n = meta.get("threads") if threads is None else check_int("--threads", threads, 1)
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
                     precision: str = "auto", data_dir=None, mem_len: int | None = None,
                     threads: int | None = None, data: str | None = None) -> dict:
    """Evaluate a trained model on ``split`` of the data it was trained on, or of ``data`` (a corpus
    name, a text file, a labelled file for a classifier, a prepared folder: ``eval_data.py``), read
    with the run's vocabulary from the data directory the run used unless ``data_dir`` says
    otherwise; the metrics are ``<split>_loss``, ``<split>_bpc``, ``<split>_ppl`` and ``<split>_acc``,
    beside ``corpus`` and ``split``. ``threads``: torch threads (default: the run's)."""
    cfg = from_dict(scored_config(tr.meta, tr.vocab, tr.spec.model, tr.path, data))
    data_dir = data_dir if data_dir is not None else tr.meta.get("data_dir")
    cfg.data.eval_split = split
    cfg.data.download = False
    if cfg.data.stream is None:  # a config written without the trainer: the member decides, as in training
        cfg.data.stream, _ = stream(cfg, tr.spec.to_dict())
    dev = next(tr.model.parameters()).device
    try:
        task = make_task(cfg.data, cfg.train.batch_size, seed=cfg.train.seed, data_dir=data_dir, vocab=tr.vocab,
                         objective=tr.spec.objective.name, labels=(tr.meta.get("data") or {}).get("labels"))
    except OutsideVocabulary as e:  # only --data can hold characters the run's own corpus lacked
        raise outside(e, cfg.data.corpus, tr.vocab) from None
    t0 = time.perf_counter()
    with run_threads(tr.meta, dev, threads):
        used = torch.get_num_threads()
        e = evaluate(tr.model, task.eval_batches(max_tokens, batch_size or cfg.train.eval_batch_size
                                                 or cfg.train.batch_size),
                     device=dev, precision=run_precision(tr.meta, precision, dev), carries=task.carries_state,
                     mem_len=mem_len, metrics=task.eval_metrics)
    wall = time.perf_counter() - t0
    if mem_len is None and task.carries_state and tr.spec.state.keeps_memory:
        mem_len = tr.spec.state.mem_len  # the memory the model was built with, which evaluate() used
    return {"member": cfg.member, "name": cfg.run_name, "params": sum(p.numel() for p in tr.model.parameters()),
            "steps": tr.meta["step"], "tokens": tr.meta["tokens"], "wall_s": wall,
            "tokens_per_s": e["tokens"] / max(wall, 1e-9), "threads": used,
            "train_loss": tr.meta["metrics"]["train_loss"],
            # named after the split scored, so a test-split number never reads as a validation one
            "corpus": cfg.data.corpus or cfg.data.task, "split": split, "eval_tokens": e["tokens"],
            f"{split}_loss": e["loss"], f"{split}_bpc": e.get("bpc"),
            f"{split}_ppl": e["ppl"], f"{split}_acc": e["acc"], "mem_len": mem_len, "checkpoint": str(tr.path),
            "split_note": getattr(task, "split_note", None)}


def sample_text(tr: Trained, prompt: str | Sequence[str], n_tokens: int, *, temperature: float = 0.8,
                top_k: int | None = None, top_p: float | None = None, greedy: bool = False, seed: int = 0,
                stop: Sequence[str] = (), on_text=None, threads: int | None = None) -> str | list[str]:
    """Continue ``prompt`` by ``n_tokens`` tokens, or until the text reaches a ``stop`` string
    (left out of the result); returns the continuation. A list of prompts is decoded as one
    batch and returns one continuation per prompt, each what the prompt alone would give
    (row r samples with seed ``seed + r``). ``on_text`` sees the first row's text as it comes;
    ``threads``: torch threads while writing (default: the run's, as ``evaluate_trained``)."""
    single = isinstance(prompt, str)
    texts = [""] * (1 if single else len(prompt))
    for pieces in stream_text(tr, prompt, n_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                              greedy=greedy, seed=seed, stop=stop, threads=threads):
        texts = [t + p for t, p in zip(texts, pieces)]
        if on_text is not None and pieces[0]:
            on_text(pieces[0])
    return texts[0] if single else texts


def stream_text(tr: Trained, prompt: str | Sequence[str], n_tokens: int, *, temperature: float = 0.8,
                top_k: int | None = None, top_p: float | None = None, greedy: bool = False, seed: int = 0,
                stop: Sequence[str] = (), threads: int | None = None) -> Iterator[list[str]]:
    """Yield, step by step, the new text of each prompt's continuation ("" where a row has none
    yet). Text that may be the start of a stop string is held back until it is not; a row ends
    at its first stop string or after ``n_tokens`` tokens, the rows independently.

    Context is capped at the training length: when a row's context is full it restarts
    from its newest half (the KV cache cannot drop its oldest entries, and a model attends
    well only over lengths it was trained on)."""
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    _check_text_model(tr)
    if check_int("--tokens", n_tokens, None) < 0:
        raise ValueError(f"--tokens must be >= 0, got {n_tokens}")
    if n_tokens > MAX_NEW_TOKENS:
        raise ValueError(f"--tokens must be <= {MAX_NEW_TOKENS} per call, got {n_tokens}; for a longer text "
                         f"generate it in parts, each with the end of the last part as --prompt")
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"prompts must be one string or a non-empty list of strings, got {prompt!r}")
    stop = [stop] if isinstance(stop, str) else list(stop)
    for s in stop:
        if not isinstance(s, str) or not s:
            raise ValueError(f"a stop string must be non-empty text, got {s!r}; e.g. --stop $'\\n\\n'")
    limit = tr.seq_len
    if tr.spec.position.table_len:
        limit = min(limit, tr.spec.position.table_len)
    rows = [_Row(_prompt_ids(tr, p)[-limit:].tolist()) for p in prompts]
    if len({len(r.context) for r in rows}) > 1:
        _check_batch(tr, rows, limit)
    dev = next(tr.model.parameters()).device
    gens = [torch.Generator(device=dev).manual_seed(seed + r) for r in range(len(rows))]
    pick = dict(greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p)
    if threads is not None:
        check_int("--threads", threads, 1)
    return _write(tr, rows, n_tokens, limit, stop, gens, pick, threads)


@dataclass
class _Row:
    """One prompt's continuation: the model's context, the new ids, and how much of their
    text the caller has been given."""
    context: list[int]
    new: list[int] = field(default_factory=list)
    shown: int = 0
    done: bool = False

    def take(self, text: str, stop: list[str], final: bool = False) -> str:
        """The part of ``text`` (the continuation decoded so far) the caller may see now."""
        hits = [i for i in (text.find(s) for s in stop) if i >= 0]
        if hits:
            self.done, end = True, min(hits)
        elif final:
            end = len(text)
        else:  # a possible start of a stop string, or a character cut mid-bytes, waits
            held = max((k for s in stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
            end = len(text) - max(held, int(text.endswith("\ufffd")))
        piece, self.shown = text[self.shown:end], max(self.shown, end)
        return piece


def _write(tr: Trained, rows: list[_Row], n_tokens: int, limit: int, stop: list[str], gens: list, pick: dict,
           threads: int | None):
    """The decoding under the run's thread count (``run_threads``; restored when it ends or is closed)."""
    with run_threads(tr.meta, next(tr.model.parameters()).device, threads):
        yield from _decode(tr, rows, n_tokens, limit, stop, gens, pick)


def _decode(tr: Trained, rows: list[_Row], n_tokens: int, limit: int, stop: list[str], gens: list, pick: dict):
    dev = next(tr.model.parameters()).device
    while live := [r for r, row in enumerate(rows) if not row.done and len(row.new) < n_tokens]:
        for r in live:  # rows are in step: they all have n_tokens - len(new) to go
            if len(rows[r].context) >= limit:
                rows[r].context = rows[r].context[-(limit // 2):]
        room = min(n_tokens - len(rows[live[0]].new), *(limit - len(rows[r].context) for r in live))
        ids, padding = left_pad([torch.tensor(rows[r].context, device=dev) for r in live])
        steps = stream_tokens(tr.model, ids, room, padding=padding, generator=[gens[r] for r in live], **pick)
        for nxt in steps:
            pieces = [""] * len(rows)
            for r, t in zip(live, nxt.tolist()):
                row = rows[r]
                if not row.done:
                    row.context.append(t)
                    row.new.append(t)
                    pieces[r] = row.take(tr.vocab.decode(row.new), stop)
            yield pieces
            if all(rows[r].done for r in live):
                steps.close()
                break
    yield [row.take(tr.vocab.decode(row.new), stop, final=True) if not row.done else "" for row in rows]


def _member(tr: Trained) -> str:
    return str(tr.meta.get("config", {}).get("member", "?"))


def _check_text_model(tr: Trained) -> None:
    """Only a decoder trained on text continues text; say what to use instead."""
    if tr.spec.model != "decoder":
        what = {"encoder": "an encoder (masked LM)", "encoder_decoder": "an encoder-decoder (it decodes a source)",
                "classifier": "a classifier"}.get(tr.spec.model, f"a {tr.spec.model}")
        raise ValueError(f"member {_member(tr)!r} is {what} and cannot continue a prompt; score it with "
                         f"`tfamily eval {tr.path}`, or train a decoder such as gpt to generate")
    if tr.vocab is None and tr.meta.get("pretrained"):  # `tfamily convert` of a directory without a tokenizer
        src = tr.meta["pretrained"]
        raise ValueError(f"{tr.path} was converted from {src}, which has no tokenizer.json, so it has no "
                         f"vocabulary to read a prompt with; copy the model's tokenizer.json into {src} and run "
                         f"`tfamily convert {src} --out NEW_DIR` again")
    if tr.vocab is None:
        raise ValueError(f"member {_member(tr)!r} at {tr.path} was trained on a synthetic task, not text; score it "
                         f"with `tfamily eval {tr.path}` (generate needs a text checkpoint)")


def _check_batch(tr: Trained, rows: list[_Row], limit: int) -> None:
    ids, padding = left_pad([torch.tensor(r.context) for r in rows])
    try:
        check_left_padding(tr.model, tr.model.new_state(), (~padding).sum(1), limit)
    except ValueError as e:
        raise ValueError(f"member {_member(tr)!r}: {e}") from None


def _prompt_ids(tr: Trained, prompt: str) -> torch.Tensor:
    ids = tr.vocab.encode(prompt) if prompt else torch.zeros(0, dtype=torch.long)
    if len(ids) == 0:
        ids = tr.vocab.encode("\n") if "\n" in getattr(tr.vocab, "chars", "\n") else torch.zeros(1, dtype=torch.long)
    return ids
