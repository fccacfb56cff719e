"""The one plotting setup: every figure tfamily writes goes through ``pyplot()``, which selects
matplotlib's file-only Agg backend, so a plot renders the same on a machine without a display
(CI, a remote GPU box) and never opens a window."""
from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend. Imported on the first figure, not with tfamily:
    pyplot takes about a second to import and most commands draw nothing."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
