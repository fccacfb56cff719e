"""Draw every attention pattern as a PNG (`tfamily patterns --out DIR`).

The style of Child et al. 2019, figure 3: on top, a W x W image where one query
pixel (black) and the pixels it attends to are shaded; below, the L x L
connectivity matrix (L = W * W; rows are queries, columns keys). Parts of a union
or of a per-head mix get their own colours, as the paper colours the two heads.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..nn.patterns import Local2D, PerHead, Union, dense_mask
from ..nn.patterns.examples import examples
from ..base.plotting import pyplot, save_figure
from ..settings.schema import add_flags, setting

COLOURS = [(0.17, 0.39, 0.70), (0.55, 0.75, 0.95), (0.95, 0.55, 0.25), (0.45, 0.75, 0.45)]


@dataclass
class Settings:
    """`tfamily patterns`."""
    out: str = setting("runs/patterns", flag=True, help="directory for the PNGs (default runs/patterns)")
    seq_len: int = setting(256, flag=True, lo=0, help="a square number: the image is sqrt(L) wide")
    patterns: list[str] | None = setting(None, flag=True, nargs="*",
                                         help=f"names to draw (default all: {', '.join(examples(256))})")
    json: bool = setting(False, flag=True, help="print the written files as a JSON list")


def add_args(p) -> None:
    add_flags(p, Settings)


def components(pattern, n_heads: int = 2) -> list[tuple[str, torch.Tensor]]:
    """(label, (L, L) mask) per coloured part: union members, or per-head patterns."""
    if isinstance(pattern, PerHead):
        return [(f"head {i}: {getattr(p, 'name', '?')}", p) for i, p in enumerate(pattern.patterns)]
    if type(pattern) is Union:
        return [(getattr(p, "name", "?"), p) for p in pattern.patterns]
    return [(getattr(pattern, "name", "?"), pattern)]


def pixel_of(pattern, seq_len: int, width: int) -> torch.Tensor:
    """Raster pixel index of each sequence position (block-raster for 2D local)."""
    pos = torch.arange(seq_len)
    if isinstance(pattern, Local2D):
        r, c, _, _ = pattern.pixel(pos)
        return r * width + c
    return pos


def draw(name: str, pattern, seq_len: int, path: Path) -> None:
    plt = pyplot()

    width = math.isqrt(seq_len)
    parts = components(pattern)
    masks = [dense_mask(p, seq_len, seq_len)[0] for _, p in parts]
    pixels = pixel_of(pattern, seq_len, width)
    query = int((pixels == (width * 2 // 3) * width + width // 2 + 1).nonzero()[0])
    image = torch.ones(width * width, 3)
    matrix = torch.ones(seq_len, seq_len, 3)
    for i, m in reversed(list(enumerate(masks))):
        colour = torch.tensor(COLOURS[i % len(COLOURS)])
        image[pixels[m[query]]] = colour
        matrix[m] = colour
    image[pixels[query]] = 0.0
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(4, 7.5), gridspec_kw={"height_ratios": [1, 1]})
    top.imshow(image.view(width, width, 3).numpy(), interpolation="nearest")
    top.set_xticks(torch.arange(-0.5, width, 1).tolist(), minor=True)
    top.set_yticks(torch.arange(-0.5, width, 1).tolist(), minor=True)
    top.grid(which="minor", color="0.8", linewidth=0.3)
    top.tick_params(which="both", length=0, labelbottom=False, labelleft=False)
    density = float(torch.stack(masks).any(0).float().mean())
    top.set_title(f"{name}  (density {density:.3f})", fontsize=9)
    bottom.imshow(matrix.numpy(), interpolation="nearest")
    bottom.set_xlabel("key", fontsize=8)
    bottom.set_ylabel("query", fontsize=8)
    bottom.tick_params(labelsize=6)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[i % len(COLOURS)]) for i in range(len(parts))]
    bottom.legend(handles, [label for label, _ in parts], fontsize=6, loc="upper right")
    save_figure(fig, path, dpi=120)


def run(args) -> int:
    if math.isqrt(args.seq_len) ** 2 != args.seq_len:
        raise ValueError(f"--seq-len must be a square number (the image is sqrt(L) wide), got {args.seq_len}")
    catalogue = examples(args.seq_len)
    names = args.patterns or list(catalogue)
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise ValueError(f"unknown pattern(s) {unknown}; choose from {', '.join(catalogue)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        path = out / f"{name}.png"
        draw(name, catalogue[name], args.seq_len, path)
        written.append(str(path))
    print(json.dumps(written, indent=2) if args.json else "\n".join(written))
    return 0
