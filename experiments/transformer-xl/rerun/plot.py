"""The transformer-xl page's figure from the rerun's rows: val bpc per member (current presets
against the old ones) and XL's val bpc against the memory length at evaluation.

    python experiments/transformer-xl/rerun/plot.py docs/results/img/xl_rerun.png
"""
import csv
import sys
from pathlib import Path

from tfamily.base.plotting import pyplot

HERE = Path(__file__).parent


def rows(name: str) -> list[dict]:
    with open(HERE / name, newline="") as f:
        return list(csv.DictReader(f))


def main(out: str) -> None:
    plt = pyplot()
    members, mem = rows("members.csv"), rows("eval_mem_len.csv")
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = range(len(members))
    a.bar([i - 0.2 for i in x], [float(r["val_bpc_old_presets_938186a"]) for r in members], 0.4,
          label="old presets (938186a)", color="#bbbbbb")
    a.bar([i + 0.2 for i in x], [float(r["val_bpc"]) for r in members], 0.4, label="base recipe + paper changes")
    a.set_xticks(list(x), [r["member"] for r in members])
    a.set_ylim(2.3, 3.3)
    a.set_ylabel("val bpc after 600 steps (lower is better)")
    a.set_title("Tiny Shakespeare, d 128, 4 layers, segment 64")
    a.legend(loc="upper right", fontsize=8)
    b.plot([int(r["eval_mem_len"]) for r in mem], [float(r["val_bpc"]) for r in mem], "o-")
    b.axvline(64, color="grey", ls=":", label="mem_len in training")
    b.set_xscale("symlog", linthresh=32)
    b.set_xlabel("mem_len at evaluation")
    b.set_ylabel("val bpc (32,768 tokens)")
    b.set_title("transformer_xl with longer memory")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "xl_rerun.png")
