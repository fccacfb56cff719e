"""How fast the fused SDPA kernel processes score pairs in small tiles versus one long call.

`tfamily bench sdpa-tiles --json` times forward + backward of PyTorch's fused
``scaled_dot_product_attention`` on already-gathered tiles: ``L / B`` query tiles of ``B``
rows, each against ``K * B`` keys (the shapes the ``blocksparse`` kernel hands to SDPA for
a banded pattern), with and without an additive mask, and compares the pairs per second
with one dense causal call over the whole length (``is_causal``; L (L + 1) / 2 pairs per
head). No gathering or scattering is timed, so the ratio ``tile_cost`` = dense pair rate /
tile pair rate is a floor for any kernel that runs a pattern as SDPA on tiles: such a
kernel's time is at least ``tile_cost x (computed pairs / allowed pairs) x density x
dense time``. The attention benchmark's target (within 1.5x of density x dense time) is
below that floor whenever ``tile_cost x`` the tile waste exceeds 1.5.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from .results import write_rows
from ..settings.schema import add_flags, setting

FIELDS = ["kind", "seq_len", "block", "key_tiles", "masked", "fwd_bwd_ms", "pairs", "gpairs_per_s", "tile_cost",
          "heads", "d_head", "threads"]


@dataclass
class Settings:
    """`tfamily bench sdpa-tiles`."""
    seq_len: int = setting(16384, flag=True, lo=0)
    heads: int = setting(8, flag=True, lo=0)
    d_head: int = setting(64, flag=True, lo=0)
    tiles: list[str] = setting(["64x5", "128x3", "256x2"], flag=True,
                               help="BxK: query tile rows B against K * B keys")
    repeats: int = setting(3, flag=True, lo=0, help="timed calls (the fastest is kept)")
    threads: int = setting(0, flag=True, lo=0, help="torch threads (0: torch's default)")
    out: str = setting("runs/bench/sdpa-tiles", flag=True, help="directory for sdpa_tiles.json/.csv")
    json: bool = setting(False, flag=True, help="print the rows as a JSON list")


def add_args(p) -> None:
    add_flags(p, Settings)


def parse_tile(text: str) -> tuple[int, int]:
    try:
        b, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--tiles: {text!r} is not BxK (e.g. 128x3)") from None
    if b < 1 or k < 1:
        raise ValueError(f"--tiles: {text!r} needs B >= 1 and K >= 1")
    return b, k


def _best(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(seq_len: int, heads: int, d_head: int, tiles: list[tuple[int, int]], repeats: int) -> list[dict]:
    import torch
    import torch.nn.functional as F
    L, h, e = seq_len, heads, d_head
    for b, _ in tiles:
        if L % b:
            raise ValueError(f"--seq-len {L} is not a multiple of the tile rows {b}")
    q, k, v = (torch.randn(1, h, L, e, requires_grad=True) for _ in range(3))
    g = torch.randn(1, h, L, e)
    s = _best(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g), min(repeats, 1))
    pairs = h * L * (L + 1) // 2
    dense_rate = pairs / s
    rows = [dict(kind="dense_causal", seq_len=L, block=None, key_tiles=None, masked=False,
                 fwd_bwd_ms=s * 1e3, pairs=pairs, gpairs_per_s=dense_rate / 1e9, tile_cost=1.0)]
    del q, k, v, g
    for b, kk in tiles:
        n = L // b
        qt = torch.randn(h, n, b, e, requires_grad=True)
        kt, vt = (torch.randn(h, n, kk * b, e, requires_grad=True) for _ in range(2))
        gt = torch.randn(h, n, b, e)
        mask = torch.zeros(1, n, b, kk * b)
        pairs = h * n * b * kk * b
        for masked in (False, True):
            m = mask if masked else None
            s = _best(lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=m).backward(gt), repeats)
            rows.append(dict(kind="tiles", seq_len=L, block=b, key_tiles=kk, masked=masked, fwd_bwd_ms=s * 1e3,
                             pairs=pairs, gpairs_per_s=pairs / s / 1e9, tile_cost=dense_rate / (pairs / s)))
    return rows


def run(args) -> int:
    import torch
    for name in ("seq_len", "heads", "d_head", "repeats"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    tiles = [parse_tile(t) for t in args.tiles]
    rows = measure(args.seq_len, args.heads, args.d_head, tiles, args.repeats)
    for r in rows:
        r.update(heads=args.heads, d_head=args.d_head, threads=torch.get_num_threads())
    out = write_rows(args.out, "sdpa_tiles", rows, FIELDS)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            shape = "dense causal" if r["kind"] == "dense_causal" else \
                f"{r['block']} x {r['key_tiles'] * r['block']}{' masked' if r['masked'] else ''}"
            print(f"{shape:<22}{r['fwd_bwd_ms']:>10.0f} ms {r['gpairs_per_s']:>8.3f} Gpairs/s "
                  f"cost x{r['tile_cost']:.2f}")
    return 0
