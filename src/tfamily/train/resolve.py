"""A member's defaults in a given run: what its paper's mechanism needs from the data, decided
once at start, with one line for each decision that changes what the member does.

- Size. ``cfg.size`` (small or paper, ``presets.py``) gives the member's sizes, under the config's
  ``model`` overrides and before the context rule below.
- Streams. A member whose state crosses segments (XL memory, Dai et al. 2019, section 3.2; an
  RNN's hidden state under truncated backpropagation, Williams & Peng 1990) trains and evaluates
  on contiguous streams, so that row r of batch t + 1 continues row r of batch t and the state
  holds the text before the segment: that is what ``data.stream`` unset (null) means for it.
  ``data.stream=false`` is kept, with a note that it empties the state on every batch.
- Context. A sparse member's sizes are its paper's, chosen for its paper's context; at a shorter
  ``data.seq_len`` they can cover the whole sequence, and the pattern is then plain attention.
  The member's own rule (``members.Member.at_context``, stated in its docstring) scales them to
  the run's context; a value the user sets under ``model`` wins.
- A pattern that is still dense at the run's context (sizes the user chose, a pattern without a
  rule) is named in one line.
"""
from __future__ import annotations

import copy

from .. import members
from ..build import pattern
from ..nn.patterns import Causal, Full, SoftPattern, density
from ..registry import STATES
from ..members.family import follow_depth
from ..spec import Spec, merge
from . import finetune, presets
from ..settings.run import Config

_MISSING = object()


def carries_state(d: dict) -> bool:
    """Whether the spec ``d`` (a dict) has a state that crosses segments (``carried`` in STATES)."""
    return bool(STATES.entry(d["state"]["name"]).info.get("carried"))


def stream(cfg: Config, d: dict) -> tuple[bool, str | None]:
    """``data.stream`` for a run of the spec ``d``: as set, else whether it is a text language
    model whose state is carried; and the note when ``false`` turns that state's use off."""
    wanted = carries_state(d) and cfg.data.task is None and d["model"] == "decoder"
    if cfg.data.stream is None:
        return wanted, None
    if wanted and not cfg.data.stream:
        return False, (f"data.stream=false: {cfg.member} trains on random windows, so its {d['state']['name']} "
                       f"state starts empty on every batch and carries nothing across segments; drop "
                       f"data.stream=false to stream contiguous segments")
    return cfg.data.stream, None


def _leaves(d: dict, path: tuple = ()):
    """(path, value) for every value of a nested dict that is not itself a non-empty dict."""
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, (*path, k))
        else:
            yield (*path, k), v


def _get(d, path: tuple):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return _MISSING
        d = d[k]
    return d


def _user_set(model: dict, path: tuple, preset: dict) -> bool:
    """Whether the ``model`` overrides decide ``path``: they set it or a value above it, or give
    its axis another name (the preset's sizes are then not that part's)."""
    for i in range(1, len(path) + 1):
        v = _get(model, path[:i])
        if v is _MISSING:
            break
        if i == len(path) or not isinstance(v, dict):
            return True
    name = _get(model, (path[0], "name"))
    return name is not _MISSING and name != preset[path[0]].get("name")


def _describe(path: tuple, old, new) -> str:
    key = ".".join(map(str, path))
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(x, dict) for x in old + new):
        parts = []  # a per-layer list: the leaves that change, as their range over layers
        for sub, _ in _leaves(new[0]) if new else ():
            a, b = [_get(x, sub) for x in old], [_get(x, sub) for x in new]
            if a != b:
                parts.append(f"{key}[*].{'.'.join(sub)} {min(a)}..{max(a)} -> {min(b)}..{max(b)}")
        return ", ".join(parts)
    return f"{key} {old} -> {new}"


def at_context(cfg: Config, d: dict, seq_len: int) -> tuple[dict, str | None]:
    """The spec dict ``d`` with the member's context rule applied at ``seq_len`` (what the user set
    under ``model`` kept), and the note naming what changed."""
    rule = None if cfg.train.init_from else members.REGISTRY[cfg.member].at_context  # a checkpoint's sizes are its own
    if rule is None:
        return d, None
    preset = sized_member(cfg)
    if preset["pattern"].get("per_layer"):  # the rule scales the list the run has (``member_dict``)
        preset["pattern"]["per_layer"] = follow_depth(preset["pattern"]["per_layer"], d["depth"]["n_layers"])
    changed = [(path, v) for path, v in _leaves(rule(preset, seq_len))
               if not _user_set(cfg.model, path, preset) and _get(d, path) != v]
    if not changed:
        return d, None
    out = copy.deepcopy(d)
    for path, v in changed:
        _get(out, path[:-1])[path[-1]] = v
    what = ", ".join(_describe(path, _get(d, path), v) for path, v in changed)
    keys = " or ".join("model." + ".".join(path) for path, _ in changed)
    return out, (f"{cfg.member} at context {seq_len}: {what}, so its attention stays sparse (its paper's sizes "
                 f"are for longer sequences); set {keys} to choose")


def dense_note(spec: Spec, seq_len: int) -> str | None:
    """One line when no layer's pattern is sparse at ``seq_len``. Causal and full attention
    (dense by definition) and learned spans (``SoftPattern``) are not checked; one layer stands
    for each entry of ``per_layer`` (BigBird's per-layer random blocks keep their density)."""
    layers = [pattern(spec, i) for i in range(min(spec.depth.n_layers, max(1, len(spec.pattern.per_layer))))]
    checked = [p for p in layers if not isinstance(p, (Causal, Full, SoftPattern))]
    if not checked or any(density(p, seq_len, n_heads=spec.heads.n_heads) < 1.0 for p in checked):
        return None
    return (f"pattern {spec.pattern.name} is dense at context {seq_len}: every query sees every key "
            f"{'causal' if checked[0].causal else 'full'} attention gives it, so it trains as plain attention; "
            f"set smaller model.pattern.params or a longer data.seq_len to make it sparse")


def sized_member(cfg: Config) -> dict:
    """The member's spec as a dict at the config's ``size`` (``presets.py``)."""
    return presets.member_dict(cfg.member, cfg.size, members.get(cfg.member)().to_dict())


def depth_note(cfg: Config, d: dict) -> str | None:
    """One line when the member's own per-layer pattern list was resampled to the run's depth."""
    if cfg.train.init_from:
        return None
    own = sized_member(cfg)["pattern"].get("per_layer", [])
    n = d["depth"]["n_layers"]
    if not own or len(own) == n or _user_set(cfg.model, ("pattern", "per_layer"), sized_member(cfg)):
        return None
    return (f"{cfg.member} at depth {n}: its {len(own)} per-layer patterns are resampled from the first layer's to "
            f"the last's ({', '.join(_short(p) for p in d['pattern']['per_layer'])}); set model.pattern.per_layer "
            f"to choose")


def _short(p: dict) -> str:
    return f"{p['name']}({', '.join(f'{k}={v}' for k, v in p.get('params', {}).items())})"


def member_dict(cfg: Config) -> dict:
    """The member's spec as a dict at the config's ``size`` (or the spec of ``train.init_from``'s
    checkpoint), with the config's ``model`` overrides."""
    base = finetune.source_spec(cfg.train.init_from) if cfg.train.init_from else sized_member(cfg)
    d = merge(base, cfg.model)  # another name on an axis drops the old choice's params and per_layer
    if not cfg.train.init_from and not _user_set(cfg.model, ("pattern", "per_layer"), base):
        d["pattern"]["per_layer"] = follow_depth(d["pattern"].get("per_layer", []), d["depth"]["n_layers"])
    if cfg.train.activation_checkpointing:
        d["depth"]["checkpointing"] = True
    return d


def as_classifier(d: dict, n_classes: int) -> dict:
    """The spec dict ``d`` as a classifier of ``n_classes`` (a labelled task's); an encoder's trunk
    is read at its first token, the [CLS] BERT and RoBERTa were pre-trained to fill."""
    params = {"n_classes": n_classes, **({"pool": "first"} if d["model"] == "encoder" else {})}
    if d["objective"]["name"] == "classification":
        params = {**d["objective"].get("params", {}), "n_classes": n_classes}
    model = d["model"] if d["model"] == "dual_encoder" else "classifier"  # a pair task's dual encoder stays one
    return {**d, "model": model, "objective": {"name": "classification", "params": params}}


def make_spec(cfg: Config, vocab_size: int, seq_len: int, n_classes: int | None = None) -> tuple[Spec, str | None]:
    """The member's spec with the config's ``model`` overrides, sized to the task's vocabulary
    and fitted to its context (``at_context``), a classifier when the task has ``n_classes``, and
    the note saying what that changed."""
    d, scaled = at_context(cfg, member_dict(cfg), seq_len)
    scaled = "\n".join(filter(None, (depth_note(cfg, d), scaled))) or None
    d = as_classifier(d, n_classes) if n_classes is not None else d
    if "vocab_size" not in cfg.model and not cfg.train.init_from:
        d["vocab_size"] = vocab_size
    elif not isinstance(d["vocab_size"], int) or d["vocab_size"] < vocab_size:
        where, fix = (("the checkpoint's vocab_size", "give the checkpoint its tokenizer.json") if cfg.train.init_from
                      else ("model.vocab_size", "drop the override or raise it"))
        raise ValueError(f"{where}={d['vocab_size']!r} is smaller than the data's vocabulary ({vocab_size}); {fix}")
    spec = Spec.from_dict(d)
    if 0 < spec.position.table_len < seq_len:  # a learned table of max_len rows caps the length
        raise ValueError(f"model.position.max_len={spec.position.max_len} is shorter than the sequence length "
                         f"{seq_len}; set model.position.max_len >= {seq_len} or lower data.seq_len")
    return spec, scaled
