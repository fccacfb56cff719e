"""What differs between finished runs, for `tfamily compare`.

A run is read for its spec (its newest checkpoint's, else rebuilt from its config), its data and
train settings, and the threads and precision it ran with (result.json, where the run recorded
them). A spec field in which the runs' members themselves differ (their presets at the runs' size,
or the changes a member's registration declares), and which no ``model.*`` override set, is the
members' own difference: what a comparison of members is for. Anything else (data, vocabulary,
budget, seed, threads, precision, overrides, other train settings) means the gap between the runs
is not the members' alone, and ``warning`` says so in one line.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Run

# Config keys that say where a run writes and how it reports, not what it trains: never a difference.
QUIET = {"train.out", "train.progress", "train.tensorboard", "train.keep", "train.ckpt_every", "train.log_every",
         "train.check_every", "train.eval_every", "data.download"}
# What a setting is, named in the warning line; a key not here is named itself.
KINDS = {"data.corpus": "data", "data.task": "data", "data.task_params": "data", "data.seq_len": "data",
         "data.eval_split": "data", "data.stream": "data", "data.vocab": "vocabulary", "model.vocab_size": "vocabulary",
         "train.max_steps": "budget", "train.time_budget": "budget", "train.seed": "seed",
         "train.threads": "threads", "train.precision": "precision"}


def _flat(d: dict, prefix: str = "") -> dict:
    """A nested dict's leaves by dotted key (lists, such as per-layer patterns, are one value; an
    empty mapping is no leaf: ``params: {}`` and no params say the same)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def spec_of(run: Run) -> dict | None:
    """The spec the run trained: its newest checkpoint's (``meta.json``), else rebuilt from its
    config (the member at its size with its ``model`` overrides), else None."""
    from ..base.textload import read_json
    for meta in sorted(run.path.glob("checkpoints/step-*/meta.json"), reverse=True):
        try:
            spec = read_json(meta).get("spec")
        except (OSError, ValueError, TypeError):  # a corrupt checkpoint: an older one, or the config, says it
            continue
        if isinstance(spec, dict):
            return spec
    if not run.config.get("member"):
        return None
    try:
        from ..train import config, resolve
        return resolve.member_dict(config.from_dict(run.config))
    except (ValueError, TypeError, KeyError):
        return None


def settings(run: Run) -> dict:
    """What the run trained, by dotted key: its data and train settings (the threads and precision
    it ran with where result.json has them), its size and every field of its spec (``model.*``)."""
    cfg, out = run.config, {"size": run.config.get("size")}
    for sec in ("data", "train"):
        out.update({f"{sec}.{k}": v for k, v in (cfg.get(sec) or {}).items() if f"{sec}.{k}" not in QUIET})
    out.update({f"train.{k}": run.result[k] for k in ("threads", "precision") if run.result.get(k) is not None})
    spec = spec_of(run)
    if spec is not None:
        out.update({f"model.{k}": v for k, v in _flat(spec).items() if k not in ("member", "paper")})
    return out


def _overridden(cfg: dict, key: str) -> bool:
    """Whether the run's ``model`` overrides set ``key`` (``model.a.b``), a value above it, or name its
    axis's choice (whose fields are then not the member's)."""
    node, parts = cfg.get("model") or {}, key.split(".")[1:]
    if isinstance(node.get(parts[0]), dict) and "name" in node[parts[0]]:
        return True
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _presets(runs: list[Run]) -> list[dict] | None:
    """Each run's member as its preset states it, at the run's size (None: a member not in the family)."""
    from .. import members
    from ..train import presets
    try:
        return [_flat(presets.member_dict(r.config["member"], r.config.get("size", "paper"),
                                          members.get(r.config["member"])().to_dict())) for r in runs]
    except (KeyError, ValueError, TypeError):
        return None


def _declared(member: str, key: str) -> bool:
    """Whether the member's registration lists ``key`` among its paper's changes (where it has such a list)."""
    from .. import members
    changes = getattr(members.REGISTRY.get(member), "changes", None) or ()
    field = key.partition(".")[2]
    return any(field == c.key or field.startswith(c.key + ".") or c.key.startswith(field + ".") for c in changes)


def differences(runs: list[Run]) -> list[dict]:
    """Every setting that differs between the runs: ``key``, ``values`` (one per run, in order) and
    ``own``: a spec field in which the runs' members themselves differ (their presets at the runs'
    sizes, or their declared changes), set by no override."""
    per_run = [settings(r) for r in runs]
    if any(not any(k.startswith("model.") for k in s) for s in per_run):  # a spec not known: fields not compared
        per_run = [{k: v for k, v in s.items() if not k.startswith("model.")} for s in per_run]
    keys = list(dict.fromkeys(k for s in per_run for k in s))
    members_ = [r.config.get("member", r.result.get("member")) for r in runs]
    presets = _presets(runs) if len(set(members_)) > 1 else None
    out = []
    for key in keys:
        values = [s.get(key) for s in per_run]
        if all(v == values[0] for v in values):
            continue
        own = (len(set(members_)) > 1 and key.startswith("model.") and KINDS.get(key) is None
               and not any(_overridden(r.config, key) for r in runs)
               and (presets is None or len({json.dumps(p.get(key[6:]), sort_keys=True) for p in presets}) > 1
                    or any(_declared(m, key) for m in members_)))
        out.append({"key": key, "values": values, "own": own})
    return out


def warning(diffs: list[dict]) -> str | None:
    """One line naming what differs beyond the members' own choices, or None."""
    other = [d for d in diffs if not d["own"]]
    if not other:
        return None
    order = list(dict.fromkeys(KINDS.values()))
    kinds = sorted(dict.fromkeys(KINDS.get(d["key"], d["key"]) for d in other),
                   key=lambda k: order.index(k) if k in order else len(order))
    return (f"warning: the runs differ in {', '.join(kinds)}, not only in their members' own choices, so the gap "
            f"between them is not the members' alone; rerun with these settings equal to compare the members")


def _shown(v) -> str:
    text = v if isinstance(v, str) else json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def render_differences(diffs: list[dict]) -> str:
    """One line per differing setting: its values run by run, marked when it is the members' own."""
    if not diffs:
        return ""
    width, own = max(len(d["key"]) for d in diffs), "  (the members' own)"
    return "differs:\n" + "".join(f"  {d['key']:<{width}}  {' | '.join(_shown(v) for v in d['values'])}"
                                  f"{own if d['own'] else ''}\n" for d in diffs)
