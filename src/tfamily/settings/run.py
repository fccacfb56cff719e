"""A training run's settings: a member, spec overrides, data and training settings, declared once.

A config file (YAML or TOML; the named ones ship in ``tfamily/configs/``) has these parts::

    member: gpt                 # a name from `tfamily members`
    size:   small               # small | paper | auto: the member's sizes and the batch (train/presets.py)
    model:  {d_model: 256, depth: {n_layers: 4}}   # overrides of the member's spec
    data:   {corpus: tinyshakespeare, seq_len: 256}
    train:  {batch_size: 32, lr: 2.0e-3, max_steps: 2000}

Command-line ``key=value`` overrides address the same tree with dotted keys
(``model.heads.n_kv_heads=2``, ``train.lr=3e-3``, ``data.corpus=kjv``); values are parsed as YAML
scalars, so ``true``, ``256``, ``3e-3`` and ``[0.9, 0.95]`` mean what they say. Unknown keys are
refused with the list of valid ones. Files, ``base`` and overrides are merged by OmegaConf, so a
value may name another: ``data.seq_len=${model.position.max_len}``. The flags of `tfamily train`
(``--steps``, ``--time``, ...) are the fields below that declare one.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

from .vocab_names import bpe_size
from ..base.numbers import check_int, check_number
from ..base.options import parse_duration
from .schema import build, check, given, parse_overrides as _parse_overrides, setting

PRECISIONS = ("auto", "bf16", "fp16", "fp32", "machine")
OPTIMIZERS = ("adamw", "muon")  # built by train/optim.make_optimizer
DEVICES = ("auto", "cpu", "cuda")
PARALLEL = ("ddp", "fsdp")  # how ranks under torchrun split the work (train/distributed.py)
MAX_SEED = 2**63 - 1
LORA = {"rank": 8, "alpha": 16.0, "targets": ["qkv_proj", "out_proj"]}  # Hu et al. 2021 adapt attention
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_run_name(key: str, name) -> None:
    """A run name becomes the directory ``runs/train/<name>``: one plain path component, so
    no name ('../x', 'a/b', '/tmp') writes outside the runs directory. ``train.out`` is the
    way to put a run elsewhere."""
    if name is not None and (not isinstance(name, str) or not _RUN_NAME.fullmatch(name)):
        raise ValueError(f"{key}={name!r} is not a plain run name; use letters, digits, '.', '_' and '-' "
                         f"(no '/', no leading '.'), or set train.out=DIR to choose the run directory")


def _vocab(key: str, vocab) -> None:
    if vocab not in (None, "byte", "char") and not bpe_size(vocab):
        raise ValueError(f"{key}={vocab!r} is not valid; valid: byte, char, bpe:N (a byte-level BPE of N "
                         f"tokens trained on the training split), or null for the corpus default")


def _duration(key: str, value) -> None:
    parse_duration(value, key)


def _grad_clip(key: str, value) -> None:
    if value is not None and not isinstance(value, bool) and value == 0:
        raise ValueError(f"{key}=0 would clip every gradient to zero; to turn clipping off "
                         f"use {key}=null, else a max norm > 0 such as 1.0")
    check_number(key, value, 0.0, lo_open=True, none=True)


def _betas(key: str, betas) -> None:
    if not isinstance(betas, tuple) or len(betas) != 2 or not all(
            isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in betas):
        shown = list(betas) if isinstance(betas, tuple) else betas
        raise ValueError(f"{key} must be two numbers in [0, 1), got {shown!r}")


def _device(key: str, device) -> None:
    if device not in DEVICES and not str(device).startswith("cuda:"):
        raise ValueError(f"{key}={device!r} is not valid; valid: {', '.join(DEVICES)} or cuda:N")


def _init_from(key: str, init_from) -> None:
    if init_from is not None and (not isinstance(init_from, str) or not init_from.strip()):
        raise ValueError(f"{key} must be a directory path (a Hugging Face directory or a tfamily run), "
                         f"got {init_from!r}")


def _lora(key: str, lora) -> None:
    """``train.lora``: empty (no LoRA) or some of ``LORA``'s keys (train/finetune.py applies it)."""
    if not isinstance(lora, dict):
        raise ValueError(f"{key} must be a mapping such as {{rank: 8}} (empty: no LoRA), got {lora!r}")
    bad = sorted(set(lora) - set(LORA), key=str)
    if bad:
        raise ValueError(f"unknown {key} key(s) {bad}; valid: {', '.join(LORA)}")
    if not lora:
        return
    s = {**LORA, **lora}
    check_int(f"{key}.rank", s["rank"], 1, hint=f"e.g. {key}.rank=8")
    check_number(f"{key}.alpha", s["alpha"], 0.0, lo_open=True, hint=f"e.g. {key}.alpha=16")
    t = [s["targets"]] if isinstance(s["targets"], str) else s["targets"]
    if not isinstance(t, list) or not t or not all(isinstance(x, str) and x for x in t):
        raise ValueError(f"{key}.targets must be a list of linear layer names such as [qkv_proj, out_proj], "
                         f"got {s['targets']!r}")


@dataclass
class DataConfig:
    """Where batches come from: a text corpus (name or path) or a synthetic task."""
    corpus: str | None = setting("tinyshakespeare", what="a corpus name or a file path")
    vocab: str | None = setting(None, check=_vocab)  # byte | char | bpe:N (data/subword.py) | None: the corpus's
    task: str | None = setting(None)  # a synthetic task (tfamily.data.TASKS) or reverse_dictionary; replaces corpus
    task_params: dict = setting({})
    seq_len: int = setting(256, lo=1)  # text only; a task fixes its own length
    # contiguous streams that carry the model's state across batches; None: when the member's state
    # is carried (XL memory, RNN hidden)
    stream: bool | None = setting(None, what="the member decides")
    download: bool = setting(False)  # fetch a missing downloadable corpus (needs network)
    eval_split: str = setting("val", choices=("val", "test"))


@dataclass
class TrainConfig:
    """How to train. ``batch_size`` is the global number of rows per micro-batch
    (split evenly over ranks); one optimiser step sees ``batch_size * accum`` rows."""
    batch_size: int = setting(32, lo=1)
    accum: int = setting(1, lo=1)
    max_steps: int | None = setting(1000, lo=1, flag="--steps", old=("--max-steps",),
                                    help="stop after this many optimiser steps (default: 1000; none with --time alone)")
    time_budget: str | float | None = setting(  # '5m', '90s', '1h', or seconds; caps the training loop
        None, check=_duration, flag="--time", old=("--time-budget",), metavar="DUR",
        help="wall-clock budget for training plus its final evaluation, e.g. 5m, 90s, 1h")
    lr: float = setting(1e-3, lo=0.0, lo_open=True)
    min_lr_ratio: float = setting(0.1, lo=0.0, hi=1.0)  # cosine decays to lr * min_lr_ratio
    warmup: int = setting(100, lo=0)
    weight_decay: float = setting(0.1, lo=0.0)
    betas: tuple = setting((0.9, 0.95), check=_betas)
    eps: float = setting(1e-8, lo=0.0)
    optimizer: str = setting("adamw", choices=OPTIMIZERS)  # muon: Muon on the hidden matrices, AdamW on the rest
    # AdamW's fused kernel; None = when every weight is a float on CPU/CUDA; false = torch's per-tensor
    # steps (which round like torch.optim.Adam)
    fused: bool | None = setting(None, what="fused when it can")
    grad_clip: float | None = setting(1.0, check=_grad_clip)  # max global grad norm; null disables
    # machine: on a bf16-native CPU this machine's calibrated choice of bf16 and fp32 (train/calibrate.py),
    # elsewhere as auto; auto: bf16 on CUDA (fp16 with loss scaling before Ampere), on a bf16-native CPU timed now
    precision: str = setting("machine", choices=PRECISIONS, flag="--precision",
                             help="autocast precision (auto: bf16 on CUDA, fp16 with loss scaling on GPUs without "
                                  "bf16 such as T4 and V100; on a bf16-native CPU the faster of fp32 and bf16, timed)")
    compile: bool = setting(False, flag="--compile", help="torch.compile the model's loss")
    activation_checkpointing: bool = setting(False, flag="--activation-checkpointing",  # the spec's depth.checkpointing
                                             help="recompute layer activations in backward to save memory")
    device: str = setting("auto", check=_device, flag="--device", help="auto, cpu, cuda or cuda:N")
    # under torchrun: ddp (each rank holds the whole model) or fsdp (weights, gradients and optimiser
    # state sharded over ranks)
    parallel: str = setting("ddp", choices=PARALLEL)
    # torch.set_num_threads; None = torch's default; 'machine' = this machine's calibrated choice of 1 or all
    # cores (train/calibrate.py); 'auto' = the faster of the two, timed at start in about 0.2 s; a resumed
    # run keeps the count it ran with (train/autotune.py)
    threads: int | str | None = setting("machine", lo=1, words=("auto", "machine"))
    seed: int = setting(0, lo=0, hi=MAX_SEED, flag="--seed", help="the random seed")  # torch takes 64 bits
    # steps; None = only at the end; auto = about 20 evaluations a run (steps, or a time budget's predicted
    # steps), the ones before the last on fewer tokens, together at most ~10% of the training time
    eval_every: int | str | None = setting("auto", lo=1, words=("auto",))
    eval_tokens: int | None = setting(100_000, lo=1)  # scored tokens per evaluation; None = the whole split
    eval_batch_size: int | None = setting(None, lo=1)  # None = batch_size
    log_every: int = setting(10, lo=1)
    # steps between reads of the non-finite checks (train/guard.py); auto = log_every in one CUDA process
    # (no host sync per step), else 1
    check_every: int | str = setting("auto", lo=1, words=("auto",))
    ckpt_every: int | None = setting(500, lo=1)  # steps; None = only at the end
    keep: int = setting(3, lo=1)  # checkpoints kept
    out: str | None = setting(None, flag="--out", metavar="DIR", help="run directory (default runs/train/<name>)")
    tensorboard: bool = setting(True)
    progress: bool = setting(True)
    init_from: str | None = setting(  # start from a Hugging Face directory or a tfamily run (train/finetune.py)
        None, check=_init_from, flag="--init-from", metavar="DIR",
        help="start from these weights: a Hugging Face directory or a tfamily run; its spec replaces the "
             "member's, model.* overrides change axes, the start line names new and dropped weights")
    lora: dict = setting({}, check=_lora)  # {rank, alpha, targets}: train low-rank adapters only (finetune.py)


@dataclass
class Config:
    name: str | None = setting(None, check=check_run_name)
    member: str = setting("gpt", what="a member name (see `tfamily members`)", flag="--member",
                          help="family member to train (see `tfamily members`)")
    model: dict = setting({})  # overrides of the member's spec
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    size: str = setting("paper", choices=("small", "paper", "auto"), flag="--size",  # auto: decided by presets
                        help="the member's sizes and the batch: small (minutes on a CPU), paper (the paper's model), "
                             "auto (default: small on a CPU, paper on CUDA); model.* and train.* settings win")

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @property
    def run_name(self) -> str:
        return self.name or self.member


SECTIONS = tuple(f.name for f in dataclasses.fields(Config))
EXAMPLE = "train.lr=3e-3, model.d_model=256, data.corpus=kjv"


def from_dict(d: dict) -> Config:
    """A checked Config from a plain (nested) dict whose size is decided (``train/presets.resolve``)."""
    train = d.get("train") if isinstance(d, dict) else None
    if isinstance(train, dict) and train.get("time_budget") is not None and "max_steps" not in train:
        # a time budget alone ends the run: the default step count is for a run given no budget,
        # else `--time 5m` would stop at step 1,000 after a minute and two members would not get equal time
        d = {**d, "train": {**train, "max_steps": None}}
    cfg = build(Config, d)
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Every setting by its declaration, then the rules across settings."""
    check(cfg)
    t, d = cfg.train, cfg.data
    if t.parallel == "fsdp" and t.optimizer == "muon":
        raise ValueError("train.optimizer=muon cannot run with train.parallel=fsdp: Muon orthogonalises whole "
                         "matrices and FSDP gives each rank a shard; use train.optimizer=adamw or train.parallel=ddp")
    if t.max_steps is None and t.time_budget is None:
        raise ValueError("set train.max_steps or train.time_budget (--steps N / --time 5m); a run needs an end")
    if (d.corpus is None) == (d.task is None):
        raise ValueError(f"set exactly one of data.corpus (a corpus name or file) and data.task "
                         f"(a synthetic task); got corpus={d.corpus!r}, task={d.task!r}")


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """['train.lr=3e-3', 'model.d_model=128'] -> {'train.lr': 0.003, 'model.d_model': 128}."""
    return _parse_overrides(items, SECTIONS, EXAMPLE)


def flag_overrides(args) -> dict[str, Any]:
    """A parsed command line's ``key=value`` list and run flags (``--steps``...) as dotted overrides."""
    return {**parse_overrides(args.overrides), **given(args, Config)}
