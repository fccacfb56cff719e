"""`tfamily plot spans`: learned spans stay readable beside a much larger max span."""
from __future__ import annotations

import matplotlib.pyplot as plt

from tfamily.bench.spans import figure, summary


def _rows(spans: list[list[float]], max_span: int) -> list[dict]:
    return [{"layer": i, "max_span": max_span, "ramp": 32, "dynamic": False, "spans": s,
             "mean_span": sum(s) / len(s), "reach": int(max(s)) + 32,
             "flops_fraction_heads": 0.1, "flops_fraction_executed": 0.2} for i, s in enumerate(spans)]


def test_short_spans_against_a_long_max_span_get_a_log_axis():
    fig = figure(_rows([[0.0, 12.5, 40.0, 3.0], [20.0, 64.0, 1.0, 8.0]], 8192), "t")
    ax = fig.axes[0]
    assert ax.get_yscale() == "symlog"
    lo, hi = ax.get_ylim()
    # in display space the tallest bar reaches at least a third of the axis (linear: 64/8192 < 1%)
    y0, y64, y1 = ax.transData.transform([(0, lo), (0, 64.0), (0, hi)])[:, 1]
    assert (y64 - y0) / (y1 - y0) > 1 / 3
    plt.close(fig)


def test_spans_near_the_max_keep_a_linear_axis():
    fig = figure(_rows([[100.0, 200.0], [256.0, 50.0]], 512), "t")
    assert fig.axes[0].get_yscale() == "linear"
    plt.close(fig)


def test_summary_averages_layers():
    s = summary(_rows([[10.0, 30.0], [20.0, 40.0]], 512))
    assert s["mean_span"] == 25.0 and abs(s["flops_saved_heads"] - 0.9) < 1e-12
