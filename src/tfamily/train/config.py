"""Run configurations: a member, spec overrides, data and training settings.

A config file (YAML or TOML; the named ones ship in ``tfamily/configs/``) has these parts::

    member: gpt                 # a name from `tfamily members`
    size:   small               # small | paper | auto: the member's sizes and the batch (train/presets.py)
    model:  {d_model: 256, depth: {n_layers: 4}}   # overrides of the member's spec
    data:   {corpus: tinyshakespeare, seq_len: 256}
    train:  {batch_size: 32, lr: 2.0e-3, max_steps: 2000}

Command-line ``key=value`` overrides address the same tree with dotted keys
(``model.heads.n_kv_heads=2``, ``train.lr=3e-3``, ``data.corpus=kjv``); values
are parsed as YAML scalars, so ``true``, ``256``, ``3e-3`` and ``[0.9, 0.95]``
mean what they say. Unknown keys are refused with the list of valid ones. Files, ``base`` and
overrides are merged by OmegaConf, so a value may name another: ``data.seq_len=${model.position.max_len}``.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..numbers import check_flag, check_int, check_number, cut
from ..options import parse_duration
from ..textload import load_toml, load_yaml, read_text

SECTIONS = ("name", "member", "model", "data", "train", "size")
PRECISIONS = ("auto", "bf16", "fp16", "fp32", "machine")
OPTIMIZERS = ("adamw", "muon")  # built by train/optim.make_optimizer
DEVICES = ("auto", "cpu", "cuda")
PARALLEL = ("ddp", "fsdp")  # how ranks under torchrun split the work (train/distributed.py)
MAX_SEED = 2**63 - 1
# The named configs ship inside the package (package data), so `-c tiny` works from a wheel as from a
# checkout; ./configs is searched first so a project can shadow or add its own.
PACKAGE_CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@dataclass
class DataConfig:
    """Where batches come from: a text corpus (name or path) or a synthetic task."""
    corpus: str | None = "tinyshakespeare"
    vocab: str | None = None          # 'byte' | 'char' | 'bpe:N' (data/subword.py) | None = the corpus default
    task: str | None = None           # a synthetic task (tfamily.data.TASKS) or reverse_dictionary; replaces corpus
    task_params: dict = field(default_factory=dict)
    seq_len: int = 256                # text only; a task fixes its own length
    stream: bool | None = None        # contiguous streams that carry the model's state across batches;
                                      # None: when the member's state is carried (XL memory, RNN hidden)
    download: bool = False            # fetch a missing downloadable corpus (needs network)
    eval_split: str = "val"


@dataclass
class TrainConfig:
    """How to train. ``batch_size`` is the global number of rows per micro-batch
    (split evenly over ranks); one optimiser step sees ``batch_size * accum`` rows."""
    batch_size: int = 32
    accum: int = 1
    max_steps: int | None = 1000
    time_budget: str | float | None = None   # '5m', '90s', '1h', or seconds; caps the training loop
    lr: float = 1e-3
    min_lr_ratio: float = 0.1          # cosine decays to lr * min_lr_ratio
    warmup: int = 100
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    eps: float = 1e-8
    optimizer: str = "adamw"           # adamw, or muon: Muon on the hidden matrices, AdamW on the rest
    fused: bool | None = None          # AdamW's fused kernel; None = when every weight is a float on CPU/CUDA;
                                       # false = torch's per-tensor steps (which round like torch.optim.Adam)
    grad_clip: float | None = 1.0      # max global grad norm; null disables
    precision: str = "machine"         # machine: on a bf16-native CPU this machine's calibrated choice of bf16
                                       # and fp32 (train/calibrate.py), elsewhere as auto; auto: bf16 on CUDA
                                       # (fp16 with loss scaling before Ampere), on a bf16-native CPU timed now
    compile: bool = False              # torch.compile the loss
    activation_checkpointing: bool = False  # sets the spec's depth.checkpointing
    device: str = "auto"
    parallel: str = "ddp"              # under torchrun: ddp (each rank holds the whole model) or fsdp
                                       # (weights, gradients and optimiser state sharded over ranks)
    threads: int | str | None = "machine"  # torch.set_num_threads; None = torch's default; 'machine' = this
                                       # machine's calibrated choice of 1 or all cores (train/calibrate.py);
                                       # 'auto' = the faster of the two, timed at start in about 0.2 s;
                                       # a resumed run keeps the count it ran with (train/autotune.py)
    seed: int = 0
    eval_every: int | str | None = "auto"  # steps; None = only at the end; auto = about 20 evaluations a run
                                       # (steps, or a time budget's predicted steps), the ones before the
                                       # last on fewer tokens, together at most ~10% of the training time
    eval_tokens: int | None = 100_000  # scored tokens per evaluation; None = the whole split
    eval_batch_size: int | None = None  # None = batch_size
    log_every: int = 10
    check_every: int | str = "auto"    # steps between reads of the non-finite checks (train/guard.py); auto =
                                       # log_every in one CUDA process (no host sync per step), else 1
    ckpt_every: int | None = 500       # steps; None = only at the end
    keep: int = 3                      # checkpoints kept
    out: str | None = None             # run directory; None = runs/train/<name>
    tensorboard: bool = True
    progress: bool = True
    init_from: str | None = None       # start from a Hugging Face directory or a tfamily run (finetune.py)
    lora: dict = field(default_factory=dict)  # {rank, alpha, targets}: train low-rank adapters only (finetune.py)


@dataclass
class Config:
    member: str = "gpt"
    name: str | None = None
    size: str = "paper"                # small | paper (train/presets.py); auto, decided by from_dict
    model: dict = field(default_factory=dict)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @property
    def run_name(self) -> str:
        return self.name or self.member


def _check_keys(where: str, given: dict, cls) -> None:
    valid = [f.name for f in fields(cls)]
    bad = sorted(set(given) - set(valid))
    if bad:
        raise ValueError(f"unknown {where} key(s) {bad}; valid: {', '.join(valid)}")


def from_dict(d: dict) -> Config:
    """Build and validate a Config from a plain (nested) dict."""
    if not isinstance(d, dict):
        raise TypeError(f"a config must be a mapping, got {type(d).__name__}")
    bad = sorted(set(d) - set(SECTIONS))
    if bad:
        raise ValueError(f"unknown config section(s) {bad}; valid: {', '.join(SECTIONS)}")
    from .presets import resolve
    d = resolve(d)
    for sec, cls in (("data", DataConfig), ("train", TrainConfig)):
        if not isinstance(d.get(sec, {}), dict):
            raise TypeError(f"config section {sec!r} must be a mapping, got {cut(d[sec])}")
        _check_keys(sec, d.get(sec, {}), cls)
    if not isinstance(d.get("model", {}), dict):
        raise TypeError(f"config section 'model' must be a mapping of spec overrides, got {cut(d['model'])}")
    train = dict(d.get("train", {}))
    if "betas" in train:
        train["betas"] = tuple(train["betas"])
    if train.get("time_budget") is not None and "max_steps" not in train:
        # a time budget alone ends the run: the default step count is for a run given no budget,
        # else `--time 5m` would stop at step 1,000 after a minute and two members would not get equal time
        train["max_steps"] = None
    cfg = Config(member=d.get("member", "gpt"), name=d.get("name"), size=d["size"],
                 model=copy.deepcopy(d.get("model", {})), data=DataConfig(**d.get("data", {})),
                 train=TrainConfig(**train))
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Check every training/data setting, naming the option and its valid values."""
    t, d = cfg.train, cfg.data
    if not isinstance(cfg.member, str):
        raise TypeError(f"member must be a member name (see `tfamily members`), got {cfg.member!r}")
    for name in ("batch_size", "accum", "log_every", "keep"):
        check_int(f"train.{name}", getattr(t, name), 1)
    for name in ("max_steps", "ckpt_every", "eval_tokens", "eval_batch_size"):
        check_int(f"train.{name}", getattr(t, name), 1, none=True)
    if t.eval_every != "auto":
        check_int("train.eval_every", t.eval_every, 1, none=True, hint="or 'auto'")
    if t.check_every != "auto":
        check_int("train.check_every", t.check_every, 1, hint="or 'auto'")
    if t.threads not in ("auto", "machine"):
        check_int("train.threads", t.threads, 1, none=True, hint="or 'auto' or 'machine'")
    check_int("train.warmup", t.warmup, 0)
    check_int("train.seed", t.seed, 0, MAX_SEED)  # torch.manual_seed takes a 64-bit seed
    # inf and NaN are refused: an inf lr or clip norm trains nothing and shows up only as a non-finite loss
    check_number("train.lr", t.lr, 0.0, lo_open=True)
    check_number("train.weight_decay", t.weight_decay, 0.0)
    check_number("train.eps", t.eps, 0.0)
    if t.grad_clip is not None and not isinstance(t.grad_clip, bool) and t.grad_clip == 0:
        raise ValueError("train.grad_clip=0 would clip every gradient to zero; to turn clipping off "
                         "use train.grad_clip=null, else a max norm > 0 such as 1.0")
    check_number("train.grad_clip", t.grad_clip, 0.0, lo_open=True, none=True)
    check_run_name(cfg.name)
    check_number("train.min_lr_ratio", t.min_lr_ratio, 0.0, 1.0)
    if len(t.betas) != 2 or not all(isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in t.betas):
        raise ValueError(f"train.betas must be two numbers in [0, 1), got {list(t.betas)!r}")
    if t.optimizer not in OPTIMIZERS:
        raise ValueError(f"train.optimizer={t.optimizer!r} is not valid; valid: {', '.join(OPTIMIZERS)}")
    if t.parallel not in PARALLEL:
        raise ValueError(f"train.parallel={t.parallel!r} is not valid; valid: {', '.join(PARALLEL)}")
    if t.parallel == "fsdp" and t.optimizer == "muon":
        raise ValueError("train.optimizer=muon cannot run with train.parallel=fsdp: Muon orthogonalises whole "
                         "matrices and FSDP gives each rank a shard; use train.optimizer=adamw or train.parallel=ddp")
    if t.precision not in PRECISIONS:
        raise ValueError(f"train.precision={t.precision!r} is not valid; valid: {', '.join(PRECISIONS)}")
    if t.device not in DEVICES and not str(t.device).startswith("cuda:"):
        raise ValueError(f"train.device={t.device!r} is not valid; valid: {', '.join(DEVICES)} or cuda:N")
    if t.fused is not None and not isinstance(t.fused, bool):
        raise ValueError(f"train.fused must be true, false or null (fused when it can), got {t.fused!r}")
    for name in ("compile", "activation_checkpointing", "tensorboard", "progress"):
        check_flag(f"train.{name}", getattr(t, name))
    parse_duration(t.time_budget, "train.time_budget")
    from .finetune import check_settings
    check_settings(t.init_from, t.lora)
    if t.max_steps is None and t.time_budget is None:
        raise ValueError("set train.max_steps or train.time_budget (--steps N / --time 5m); "
                         "a run needs an end")
    check_int("data.seq_len", d.seq_len, 1)
    if (d.corpus is None) == (d.task is None):
        raise ValueError(f"set exactly one of data.corpus (a corpus name or file) and data.task "
                         f"(a synthetic task); got corpus={d.corpus!r}, task={d.task!r}")
    from ..data.subword import bpe_size  # imports torch (its tokenizer); config parsing does not
    if d.vocab not in (None, "byte", "char") and not bpe_size(d.vocab):
        raise ValueError(f"data.vocab={d.vocab!r} is not valid; valid: byte, char, bpe:N (a byte-level BPE of N "
                         f"tokens trained on the training split), or null for the corpus default")
    if d.eval_split not in ("val", "test"):
        raise ValueError(f"data.eval_split={d.eval_split!r} is not valid; valid: val, test")
    if not isinstance(d.task_params, dict):
        raise ValueError(f"data.task_params must be a mapping, got {d.task_params!r}")
    if d.stream is not None and not isinstance(d.stream, bool):
        raise ValueError(f"data.stream must be true or false (or null: the member decides), got {d.stream!r}")
    check_flag("data.download", d.download)


_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_run_name(name) -> None:
    """A run name becomes the directory ``runs/train/<name>``: one plain path component, so
    no name ('../x', 'a/b', '/tmp') writes outside the runs directory. ``train.out`` is the
    way to put a run elsewhere."""
    if name is None:
        return
    if not isinstance(name, str) or not _RUN_NAME.fullmatch(name):
        raise ValueError(f"name={name!r} is not a plain run name; use letters, digits, '.', '_' and '-' "
                         f"(no '/', no leading '.'), or set train.out=DIR to choose the run directory")


def check_resume(meta: dict, overrides: dict[str, Any]) -> None:
    """Refuse overrides a resumed run cannot honour. ``meta``: the checkpoint's meta.json;
    ``overrides``: dotted keys (``{"train.max_steps": 4000}``)."""
    saved, step = meta["config"]["train"], meta["step"]
    size = meta["config"].get("size", "paper")
    if overrides.get("size", size) != size:
        raise ValueError(f"--resume continues the run at its size {size!r}, not {overrides['size']!r}; drop "
                         f"--size/size= (another size is another model: start a new run)")
    if overrides.get("train.out") is not None:
        raise ValueError(f"--resume continues in the run's own directory; drop --out/train.out="
                         f"{overrides['train.out']!r} (to branch a run, copy its directory and resume the copy)")
    if "train.init_from" in overrides:  # ignored before: the run went on from its own weights
        raise ValueError(f"--resume continues the run from its own weights, not from --init-from "
                         f"{overrides['train.init_from']}; drop --init-from/train.init_from (to start from those "
                         f"weights, start a new run: --init-from DIR --out NEW_DIR)")
    for key in (k for k in overrides if k == "train.lora" or k.startswith("train.lora.")):
        lora = saved.get("lora") or {}
        was = lora if key == "train.lora" else lora.get(key.split(".", 2)[2])
        if overrides[key] != was:  # another rank's adapters do not fit the checkpoint's tensors
            raise ValueError(f"--resume continues the run with its LoRA settings ({lora or 'none'}), not "
                             f"{key}={overrides[key]!r}; drop {key} (other adapters need a new run: --init-from "
                             f"RUN {key}={overrides[key]!r} --out NEW_DIR)")
    if "train.seed" in overrides and overrides["train.seed"] != saved.get("seed"):
        raise ValueError(f"--resume continues with the run's seed {saved.get('seed')}, not "
                         f"{overrides['train.seed']!r}; drop --seed/train.seed (a new seed needs a new run)")
    max_steps = overrides.get("train.max_steps", saved.get("max_steps"))
    budget = overrides.get("train.time_budget", saved.get("time_budget"))
    if isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps <= step:
        given = "--steps" if "train.max_steps" in overrides else "its train.max_steps"
        raise ValueError(f"the checkpoint is at step {step} and {given} is {max_steps}: nothing to train; "
                         f"pass --steps N with N > {step} to train longer (or `tfamily eval` to score it)")
    seconds = parse_duration(budget, "train.time_budget") if budget is not None else None
    if seconds is not None and meta.get("elapsed", 0.0) >= seconds:
        raise ValueError(f"the run has used {meta['elapsed']:.0f} s of its time budget {budget!r}: nothing to "
                         f"train; pass --time longer than {meta['elapsed']:.0f}s to train longer")


# -- files and overrides -------------------------------------------------------------------
def find_config(name: str | Path) -> Path:
    """A config file by path, or by name in ./configs or the package's configs."""
    p = Path(name).expanduser()
    if p.is_file():
        return p
    tried = [p]
    for base in dict.fromkeys([Path("configs"), PACKAGE_CONFIGS]):
        for suffix in ("", ".yaml", ".yml", ".toml"):
            q = base / f"{name}{suffix}"
            tried.append(q)
            if q.is_file():
                return q
    available = sorted({q.stem for base in (Path("configs"), PACKAGE_CONFIGS) if base.is_dir()
                        for q in base.iterdir() if q.suffix in (".yaml", ".yml", ".toml")})
    raise FileNotFoundError(f"config {str(name)!r} not found (tried {', '.join(map(str, tried))}); "
                            f"available configs: {', '.join(available) or 'none'}")


def read_file(path: str | Path) -> dict:
    """The raw dict of a YAML or TOML config file."""
    path = Path(path)
    text = read_text(path)
    d = (load_toml(text, str(path)) if path.suffix == ".toml" else load_yaml(text, str(path))) or {}
    if not isinstance(d, dict):
        raise ValueError(f"{path} must hold a mapping with sections {', '.join(SECTIONS)}")
    return d


def parse_value(text: str) -> Any:
    """A command-line value as YAML; '3e-3' (a string to YAML 1.1) becomes a float."""
    try:
        v = load_yaml(text, f"the value {text[:40]!r}")
    except ValueError as e:
        if "not valid YAML" in str(e):
            return text
        raise
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """['train.lr=3e-3', 'model.d_model=128'] -> {'train.lr': 0.003, 'model.d_model': 128}."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or key.strip() != key:
            raise ValueError(f"override {item!r} is not key=value; e.g. train.lr=3e-3 or model.depth.n_layers=4")
        if key.split(".")[0] not in SECTIONS:
            raise ValueError(f"override key {key!r} must start with one of {', '.join(SECTIONS)} "
                             f"(e.g. model.d_model=256, train.lr=1e-3, data.corpus=kjv)")
        if not value.strip():  # YAML reads nothing as null: `key=''` in a shell silently unset the key
            raise ValueError(f"override {item!r} has no value (a shell turns {key}='' into that); give a "
                             f"value, or {key}=null to unset it")
        out[key] = parse_value(value)
    return out


_ABSENT = object()


def _tree(layers: list[dict], overrides: dict[str, Any]) -> dict:
    """``layers`` merged in order (mappings recurse, anything else is replaced), then each dotted
    override set (intermediate mappings created), as a plain dict with ``${key}`` references
    resolved. Merging and setting are OmegaConf's; its errors become one ValueError."""
    try:
        tree = OmegaConf.merge(*map(OmegaConf.create, layers))
        for key, value in overrides.items():
            parts = key.split(".")
            for i in range(1, len(parts)):  # OmegaConf.update would replace a value with a mapping
                node = OmegaConf.select(tree, ".".join(parts[:i]), default=_ABSENT)
                if node is not _ABSENT and not isinstance(node, DictConfig):
                    raise ValueError(f"override {key!r}: {parts[i - 1]!r} is {node!r}, not a mapping; make "
                                     f"{parts[i - 1]!r} a mapping of settings in the config, or drop the override")
            OmegaConf.update(tree, key, value, merge=False)
        return OmegaConf.to_container(tree, resolve=True)
    except OmegaConfBaseException as e:
        raise ValueError(f"config key {getattr(e, 'full_key', '') or '(top)'}: {str(e).splitlines()[0]}") from e


def apply_overrides(d: dict, overrides: dict[str, Any]) -> dict:
    """Set dotted keys in a nested dict (a copy); intermediate mappings are created."""
    return _tree([d], overrides)


def load(config: str | Path | None = None, overrides: list[str] | dict | None = None,
         base: dict | None = None) -> Config:
    """Read a config file (or start from ``base``/defaults) and apply ``key=value`` overrides."""
    layers = [base or {}, *([read_file(find_config(config))] if config is not None else [])]
    overrides = overrides if isinstance(overrides, dict) else parse_overrides(overrides or [])
    return from_dict(_tree(layers, overrides))


def dump(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
