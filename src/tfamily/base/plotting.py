"""The one plotting setup: every figure tfamily writes goes through ``pyplot()``, which selects
matplotlib's file-only Agg backend, so a plot renders the same on a machine without a display
(CI, a remote GPU box) and never opens a window."""
from __future__ import annotations

from pathlib import Path


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend. Imported on the first figure, not with tfamily:
    pyplot takes about a second to import and most commands draw nothing."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path: str | Path, dpi: int) -> None:
    """Lay ``fig`` out, write it to ``path`` (its folder made where missing) and close it:
    pyplot holds every figure until it is closed, so a run drawing many would keep them all."""
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
