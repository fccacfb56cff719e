"""A training run's config as the trainer reads it: the settings (declared in ``settings/run.py``)
from a config file, ``base`` and dotted overrides, at the size ``train/presets.py`` decides; what a
resumed run may not change; the config saved beside a run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..base.options import parse_duration
from ..settings import run as _run
from ..settings.run import SECTIONS, Config, parse_overrides
from ..settings.schema import find_file, read_file as _read_file, tree
from .presets import resolve

# The named configs ship inside the package (package data), so `-c tiny` works from a wheel as from a
# checkout; ./configs is searched first so a project can shadow or add its own.
PACKAGE_CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def from_dict(d: dict) -> Config:
    """A checked Config from a plain (nested) dict, its size decided (auto: small on a CPU, paper
    on CUDA) and that size's data and train defaults under what ``d`` sets."""
    if not isinstance(d, dict):
        raise TypeError(f"a config must be a mapping, got {type(d).__name__}")
    return _run.from_dict(resolve(d))


def find_config(name: str | Path) -> Path:
    """A config file by path, or by name in ./configs or the package's configs."""
    return find_file(name, [Path("configs"), PACKAGE_CONFIGS])


def read_file(path: str | Path) -> dict:
    """The raw dict of a YAML or TOML config file."""
    return _read_file(path, list(SECTIONS))


def apply_overrides(d: dict, overrides: dict[str, Any]) -> dict:
    """Set dotted keys in a nested dict (a copy); intermediate mappings are created."""
    return tree([d], overrides)


def load(config: str | Path | None = None, overrides: list[str] | dict | None = None,
         base: dict | None = None) -> Config:
    """Read a config file (or start from ``base``/defaults) and apply ``key=value`` overrides."""
    layers = [base or {}, *([read_file(find_config(config))] if config is not None else [])]
    overrides = overrides if isinstance(overrides, dict) else parse_overrides(overrides or [])
    return from_dict(tree(layers, overrides))


def dump(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")


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
    _check_resumed_lora(saved, overrides)
    if "train.seed" in overrides and overrides["train.seed"] != saved.get("seed"):
        raise ValueError(f"--resume continues with the run's seed {saved.get('seed')}, not "
                         f"{overrides['train.seed']!r}; drop --seed/train.seed (a new seed needs a new run)")
    _check_resumed_end(meta, overrides)


def _check_resumed_lora(saved: dict, overrides: dict[str, Any]) -> None:
    for key in (k for k in overrides if k == "train.lora" or k.startswith("train.lora.")):
        lora = saved.get("lora") or {}
        was = lora if key == "train.lora" else lora.get(key.split(".", 2)[2])
        if overrides[key] != was:  # another rank's adapters do not fit the checkpoint's tensors
            raise ValueError(f"--resume continues the run with its LoRA settings ({lora or 'none'}), not "
                             f"{key}={overrides[key]!r}; drop {key} (other adapters need a new run: --init-from "
                             f"RUN {key}={overrides[key]!r} --out NEW_DIR)")


def _check_resumed_end(meta: dict, overrides: dict[str, Any]) -> None:
    """A resumed run must have steps or time left to train."""
    saved, step = meta["config"]["train"], meta["step"]
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
