"""What ``tfamily bench flex-floor`` writes besides its rows: the profile of where the time between
the flex kernel (a) and the plain ``flex_attention`` call (b) goes, the plot, and the printed table."""
from __future__ import annotations

from pathlib import Path

from ..base.plotting import pyplot, save_figure


def sync(cuda: bool) -> None:
    if cuda:
        import torch
        torch.cuda.synchronize()


def profile(calls: dict, leaves: tuple, grad, cuda: bool, path: Path, title: str) -> None:
    """torch.profiler's top ops of five fwd+bwd calls (forward only on CPU) of each kernel, by self
    device time and by total CPU time, into ``path``: where the time between (a) and (b) goes."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    text = [f"# tfamily bench flex-floor profile: {title}, 5 calls each, {'fwd+bwd' if cuda else 'fwd'}"]
    for tag, fn in calls.items():
        def call():
            for t in leaves:
                t.grad = None
            with torch.set_grad_enabled(cuda):
                out = fn(*leaves)
            if cuda:
                out.backward(grad)
        try:
            for _ in range(2):
                call()
            sync(cuda)
            with torch_profile(activities=activities) as prof:
                for _ in range(5):
                    call()
                sync(cuda)
            table = prof.key_averages()
            text.append(f"\n## ({tag}) {'tfamily flex kernel' if tag == 'a' else 'plain flex_attention'}")
            for sort in (["self_device_time_total"] if cuda else []) + ["cpu_time_total"]:
                text += [f"\n### by {sort}", table.table(sort_by=sort, row_limit=20)]
        except Exception as err:  # noqa: BLE001 - the profile explains the rows; it must not end the run
            text.append(f"\n## ({tag}) profile failed: {one_line(err)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(text) + "\n")


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    done = [r for r in rows if r.get("a_fwd_ms") is not None or r.get("b_fwd_ms") is not None]
    if not done:
        return
    key = "fwd_bwd_ms" if any(r.get("a_fwd_bwd_ms") for r in done) else "fwd_ms"
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    colours = plt.get_cmap("tab10").colors
    for i, name in enumerate(dict.fromkeys(r["pattern"] for r in done)):
        rs = sorted((r for r in done if r["pattern"] == name), key=lambda r: r["seq_len"])
        c = colours[i % 10]
        for tag, style in (("a", "-o"), ("b", "--x")):
            pts = [(r["seq_len"], r[f"{tag}_{key}"]) for r in rs if r.get(f"{tag}_{key}")]
            if pts:
                axes[0].plot(*zip(*pts), style, color=c, label=f"{name} ({tag})", markersize=4)
        pts = [(r["seq_len"], r[f"a_{key}"] / r[f"b_{key}"]) for r in rs if r.get(f"a_{key}") and r.get(f"b_{key}")]
        if pts:
            axes[1].plot(*zip(*pts), "-o", color=c, label=name, markersize=4)
        pts = [(r["seq_len"], r[f"a_{key}"] / r["tiles_a"] / (r[f"dense_{key}"] / r["tiles_dense"]))
               for r in rs if r.get(f"a_{key}") and r.get(f"dense_{key}")]
        if pts:
            axes[2].plot(*zip(*pts), "-o", color=c, label=name, markersize=4)
    dense = sorted({(r["seq_len"], r[f"dense_{key}"]) for r in done if r.get(f"dense_{key}")})
    if dense:
        axes[0].plot(*zip(*dense), color="black", linewidth=2.5, label="dense causal SDPA")
    axes[1].axhline(1.1, color="red", linestyle="--", linewidth=1, label="target 1.1")
    axes[2].axhline(2.0, color="red", linestyle="--", linewidth=1, label="target 2 (64K)")
    titles = [f"{key} (a: tfamily flex, b: plain flex_attention)", "(a) / (b)",
              "(a) time per visited tile / dense causal's"]
    for ax, title in zip(axes, titles):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    r0 = done[0]
    fig.suptitle(f"flex floor, b={r0['batch']} h={r0['heads']} e={r0['d_head']} block={r0['block_size']} "
                 f"{r0['dtype']}, {r0.get('gpu') or r0['device']}, torch {r0['torch']}", fontsize=10)
    save_figure(fig, path, dpi=110)


def table(rows: list[dict]) -> str:
    def f(x, spec=".2f"):
        return "-" if x is None else format(x, spec)
    lines = [f"{'pattern':<22}{'L':>7} {'status':<9}{'a fwd':>9}{'b fwd':>9}{'a f+b':>9}{'b f+b':>9}"
             f"{'dense f+b':>10}{'a/b':>7}{'tile/dense':>11}{'diff':>9}"]
    for r in rows:
        lines.append(f"{r['pattern']:<22}{r['seq_len']:>7} {r['status']:<9}{f(r.get('a_fwd_ms')):>9}"
                     f"{f(r.get('b_fwd_ms')):>9}{f(r.get('a_fwd_bwd_ms')):>9}{f(r.get('b_fwd_bwd_ms')):>9}"
                     f"{f(r.get('dense_fwd_bwd_ms')):>10}{f(r.get('a_vs_b_fwd_bwd') or r.get('a_vs_b_fwd')):>7}"
                     f"{f(r.get('a_tile_vs_dense')):>11}{f(r.get('max_abs_diff'), '.1e'):>9}")
        for key in ("error", "a_error", "b_error"):
            if r.get(key):
                lines.append(f"    {key}: {r[key]}")
    return "\n".join(lines)


def one_line(err: BaseException) -> str:
    first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
    return f"{type(err).__name__}: {first}"[:300]
