"""This machine's speed settings: the thread count and precision a CPU run trains in by default.

``train.threads: machine`` and ``train.precision: machine`` (the defaults) read them from a
calibration kept in ``$TFAMILY_CALIBRATION`` if set, else the user cache
(``$XDG_CACHE_HOME/tfamily/speed/``, else ``~/.cache/tfamily/speed/``), one JSON file per CPU
model, core count, torch version and width bucket
(``d_model`` to the nearest power of two). A calibration times training steps of a reference
model, a 2-layer GPT at the bucket's width (forward, backward and the AdamW step), at {1, all
cores} x {fp32, bf16 where the CPU runs bf16 natively}, interleaved over rounds, and keeps the
fastest. It is taken once, on the first run at that width, and only while the load average is
below one per core: timed on a busy machine it would record the other jobs, not this machine.
Until then a run takes the conservative setting (1 thread; bf16 on a bf16-native CPU from d 256
up, else fp32) and says so. ``tfamily calibrate`` takes it again.

Why not time at every start (``train.threads: auto``, which still does, ``autotune.py``): a
0.2 s probe on a shared machine picks differently from one run to the next, so the same command
trained at very different speeds and its first time estimate moved with it. A stored choice
gives the same settings for the same command on the same machine.

The reference's measured FLOP/s, counted as ``sizes.flops_per_unit`` counts a run's, also
give the first estimate of a run's step time at the chosen setting.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.paths import cache_dir
from ..base.files import write_atomic
from ..base.hardware import cores, cpu_has_bf16, cpu_model, load_average
from ..settings.schema import add_flags, setting
from ..base.textload import load_json

SEQ, LAYERS, VOCAB = 128, 2, 65   # the reference model: a character GPT of 2 layers over 128 tokens
ROUNDS = 3                         # timed rounds per setting, after one untimed
MARGIN = 1.05                      # more threads or bf16 only when faster than the simpler setting by this
WIDTHS = (32, 4096)                # the buckets' range
PRECISIONS = ("fp32", "bf16")
ENV_VAR = "TFAMILY_CALIBRATION"    # a directory for the calibrations instead of the user cache


@dataclass(frozen=True)
class Calibration:
    """One width bucket's measurement: ``rates`` maps ``"<threads>/<precision>"`` to the
    reference's training FLOP/s; ``threads`` and ``precision`` are the setting kept."""
    width: int
    threads: int
    precision: str
    rates: dict
    cpu: str
    cores: int
    torch: str
    load: float | None
    taken: str

    def rate(self, threads: int, precision: str) -> float | None:
        """FLOP/s at ``threads`` (the nearest count measured) and ``precision``; None if not measured."""
        counts = sorted({int(k.split("/")[0]) for k in self.rates})
        near = min(counts, key=lambda n: (abs(n - threads), n))
        return self.rates.get(f"{near}/{precision}")

    def best_precision(self, threads: int) -> str:
        """The precision kept at ``threads`` (a thread count the user set)."""
        if self.rate(threads, "bf16") and self.rate(threads, "bf16") >= MARGIN * (self.rate(threads, "fp32") or 0):
            return "bf16"
        return "fp32"


def bucket(d_model: int) -> int:
    """The width bucket of ``d_model``: the nearest power of two, within ``WIDTHS``."""
    return int(min(max(2 ** round(math.log2(max(d_model, 1))), WIDTHS[0]), WIDTHS[1]))


def directory() -> Path:
    """Where calibrations are kept: ``$TFAMILY_CALIBRATION``, else the user cache's ``speed/``."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else cache_dir() / "speed"


def path(width: int) -> Path:
    """The calibration file of bucket ``width`` on this machine."""
    machine = f"{cpu_model()}|{cores()}|torch {torch.__version__.split('+')[0]}"
    return directory() / f"{hashlib.sha256(machine.encode()).hexdigest()[:12]}-d{width}.json"


def busy() -> tuple[bool, float | None, int]:
    """(whether the load average is at least one per core, the load, the cores)."""
    load, n = load_average(), cores()
    return load is not None and load >= n, load, n


def conservative(width: int) -> tuple[int, str]:
    """The setting before a calibration: 1 thread never collapses on a busy machine; bf16 from d 256
    up on a bf16-native CPU (docs/results/training.md: at d 256 bf16 is 1.8x fp32 on a Xeon)."""
    return 1, "bf16" if cpu_has_bf16() and width >= 256 else "fp32"


def read(width: int) -> Calibration | None:
    """The stored calibration of ``width``, or None. A file that does not parse or does not describe
    this machine is named on stderr and removed, so the next quiet run takes it again."""
    p = path(width)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        print(f"note: cannot read the speed calibration {p} ({e.strerror or e}); using the conservative setting",
              file=sys.stderr)
        return None
    try:
        cal = _parse(load_json(text, str(p)), width)
    except (ValueError, TypeError, KeyError) as e:
        print(f"note: the speed calibration {p} is corrupt ({str(e).splitlines()[0][:120]}); removed, it is taken "
              f"again on a quiet machine (or now with `tfamily calibrate`)", file=sys.stderr)
        with contextlib.suppress(OSError):
            p.unlink()
        return None
    return cal


def _parse(d, width: int) -> Calibration:
    if not isinstance(d, dict):
        raise TypeError(f"expected an object, got {type(d).__name__}")
    cal = Calibration(**{f.name: d[f.name] for f in dataclasses.fields(Calibration)})
    if cal.width != width or cal.cpu != cpu_model() or cal.cores != cores():
        raise ValueError(f"it describes {cal.cpu!r}, {cal.cores} cores, d {cal.width}, not this machine")
    if not isinstance(cal.threads, int) or not 1 <= cal.threads <= cores() or cal.precision not in PRECISIONS:
        raise ValueError(f"threads={cal.threads!r}, precision={cal.precision!r} are not a setting")
    if not isinstance(cal.rates, dict) or not cal.rates or not all(
            isinstance(v, (int, float)) and math.isfinite(v) and v > 0 and k.count("/") == 1
            and k.split("/")[0].isdigit() and k.split("/")[1] in PRECISIONS for k, v in cal.rates.items()):
        raise ValueError("its rates are not positive numbers per '<threads>/<precision>'")
    return cal


def write(cal: Calibration) -> Path:
    """Store ``cal`` atomically (a reader sees the old file or the new one, never half of one)."""
    p = path(cal.width)
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(p, json.dumps(dataclasses.asdict(cal), indent=1))


def reference(width: int):
    """The reference model at ``width`` and its training FLOPs per step."""
    from ..build import build
    from ..members import get
    from ..spec.sizes import flops_per_unit
    from ..spec import Spec
    from .presets import member_dict
    d = member_dict("gpt", "small", get("gpt")().to_dict())
    d.update(d_model=width, vocab_size=VOCAB, dropout=0.0)
    d["depth"] = {**d["depth"], "n_layers": LAYERS}
    d["position"] = {**d["position"], "max_len": SEQ}
    spec = Spec.from_dict(d)
    rows = min(16, max(1, round(16 * (128 / width) ** 2)))  # at most 16 x 128 tokens, ~5 GFLOP from d 128 up
    return build(spec), rows, flops_per_unit(spec, 0, SEQ) * rows * SEQ


def measure(width: int, settings: list[tuple[int, str]]) -> dict[str, float]:
    """Training FLOP/s of the reference at each (threads, precision), rounds interleaved; the
    RNG and the thread count are left as they were."""
    from .device import autocast
    from .optim import adamw
    rng, before = torch.get_rng_state(), torch.get_num_threads()
    try:
        torch.manual_seed(0)
        model, rows, flops = reference(width)
        opt = adamw(model, 1e-4, 0.0)
        x = torch.randint(0, VOCAB, (rows, SEQ + 1))
        batch = {"x": x[:, :-1], "y": x[:, 1:]}
        seconds = dict.fromkeys(settings, 0.0)
        for r in range(ROUNDS + 1):
            for n, precision in settings:
                torch.set_num_threads(n)
                t0 = time.perf_counter()
                with autocast(torch.device("cpu"), precision):
                    loss, _ = model.loss(batch)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if r:
                    seconds[(n, precision)] += time.perf_counter() - t0
    finally:
        torch.set_rng_state(rng)
        torch.set_num_threads(before)
    return {f"{n}/{p}": flops * ROUNDS / s for (n, p), s in seconds.items()}


def take(width: int, *, keep: bool = True) -> Calibration:
    """Measure bucket ``width`` now and, with ``keep``, store it."""
    most = cores()
    counts = [1, most] if most > 1 else [1]
    precisions = PRECISIONS if cpu_has_bf16() else ("fp32",)  # emulated bf16 is ~30x slower: not worth timing
    load = load_average()
    rates = measure(width, [(n, p) for n in counts for p in precisions])
    # The simplest setting unless another beats it by MARGIN: fewer threads first, then fp32.
    order = sorted(rates, key=lambda k: (int(k.split("/")[0]), PRECISIONS.index(k.split("/")[1])))
    best = order[0]
    for k in order[1:]:
        if rates[k] >= MARGIN * rates[best]:
            best = k
    cal = Calibration(width, int(best.split("/")[0]), best.split("/")[1], rates, cpu_model(), most,
                      torch.__version__.split("+")[0], load, time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    if keep:
        write(cal)
    return cal


def settle(d_model: int, notes: list[str]) -> Calibration | None:
    """This machine's calibration at ``d_model``'s bucket: stored, else taken now when the machine
    is quiet (a line in ``notes`` says so), else None with a note naming the conservative setting."""
    width = bucket(d_model)
    cal = read(width)
    if cal is not None:
        return cal
    _, load, n = busy()
    if load is not None and load < n:
        t0 = time.perf_counter()
        cal = take(width)
        notes.append(f"calibrated this machine's speed settings at d {width} in {time.perf_counter() - t0:.1f} s "
                     f"({cal.threads} thread{'s' * (cal.threads > 1)}, {cal.precision}); kept in {path(width)}")
        return cal
    threads, precision = conservative(width)
    notes.append(f"no speed calibration of this machine at d {width} yet, and the load average "
                 f"{'is unknown' if load is None else f'{load:.1f} on {n} cores is too high to take one'}: "
                 f"{threads} thread, {precision}; on a quiet machine the next run takes it, or run `tfamily calibrate`")
    return None


# -- `tfamily calibrate` -------------------------------------------------------------------------
@dataclass
class Settings:
    """`tfamily calibrate`."""
    width: list[int] | None = setting(None, flag=True, repeat=True, metavar="D", check=False,  # _calibrate says
                                      help="model width (d_model) to calibrate; repeatable (default: the widths "
                                           "already kept, else 128, 256 and 512)")
    force: bool = setting(False, flag=True,
                          help="keep the calibration even when the load average is at least one per core")
    json: bool = setting(False, flag=True, help="print one JSON object per width")
    debug: bool = setting(False, flag=True, help="show tracebacks instead of one-line errors")


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this machine's default training threads and precision again",
                       description="Time a reference model at {1, all cores} x {fp32, bf16} for each width and "
                                   "keep the fastest as the default of train.threads/train.precision (machine).")
    add_flags(p, Settings)
    p.set_defaults(func=_calibrate)


def _calibrate(args) -> int:
    for w in args.width or []:
        if isinstance(w, bool) or w < 1:
            raise ValueError(f"--width must be a model width >= 1, got {w}; e.g. --width 256")
    widths = sorted({bucket(w) for w in args.width} if args.width else set(kept()) or {128, 256, 512})
    loaded, load, n = busy()
    if loaded and not args.force:
        print(f"tfamily calibrate: the load average is {load:.1f} on {n} cores: timings now would measure the "
              f"other jobs; nothing kept. Run it on a quiet machine, or pass --force to keep it anyway",
              file=sys.stderr)
        return 1
    for w in widths:
        cal = take(w)
        if args.json:
            print(json.dumps({**dataclasses.asdict(cal), "path": str(path(w))}))
        else:
            rates = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in cal.rates.items())
            print(f"d {w}: {cal.threads} thread{'s' * (cal.threads > 1)}, {cal.precision} "
                  f"(GFLOP/s: {rates}; load {cal.load if cal.load is None else round(cal.load, 1)}) -> {path(w)}")
    return 0


def kept() -> list[int]:
    """The width buckets calibrated on this machine."""
    stem = path(128).name.split("-d")[0]
    return sorted(int(p.stem.split("-d")[1]) for p in path(128).parent.glob(f"{stem}-d*.json")
                  if p.stem.split("-d")[1].isdigit())
