"""The bad-input catalogue, part 2: every `repro`, every `bench`, `arena` and `arena merge` (part 1
and the exit statuses by kind are in test_catalogue_every_command.py). Each row: one line naming
the value and the fix, exit status 2, before any training or timing starts."""
from __future__ import annotations


import pytest

from tfamily import cli
from catalogue_rows import R, run_row  # loaded by tests/conftest.py

ROWS = [
    # -- repro ------------------------------------------------------------------------------
    R("repro reformer-duplication --length 0", ["length", ">= 1", "got 0"]),
    R("repro reformer-duplication --train bogus", ["'bogus'", "'full' or 'lshR'", "lsh4"]),
    R("repro reformer-duplication --eval lsh0", ["'lsh0'", "R >= 1"]),
    R("repro reformer-duplication --jobs 0", ["--jobs", ">= 1", "got 0"]),
    R("repro reformer-duplication --bucket-size 0", ["bucket_size", ">= 1", "got 0"]),
    R("repro reformer-duplication --steps -1", ["--steps", ">= 0", "got -1"]),
    R("repro reformer-duplication --threads -1", ["--threads", ">= 0", "got -1"]),
    R("repro sparse-text --members nosuch", ["['nosuch']", "choose from gpt"]),
    R("repro sparse-text --corpus nosuch --steps 1", ["'nosuch'", "known corpora", "file path"]),
    R("repro sparse-text --time soon", ["'soon'", "not a duration", "90s"]),
    R("repro sparse-text --lr nan --steps 1", ["train.lr", "nan", "--lr"]),
    R("repro sparse-text --steps 0", ["--steps", ">= 1", "got 0"]),
    R("repro sparse-text --block-size 0", ["--block-size", ">= 1", "got 0"]),
    R("repro sparse-text --seq-len x", ["--seq-len", "'x'", "--help"]),
    R("repro mnist-local2d --budget soon", ["'soon'", "not a duration"]),
    R("repro mnist-local2d --models nosuch", ["--models nosuch", "choose from local_2d, dense"]),
    R("repro mnist-local2d --levels 1", ["levels", "[2, 256]", "got 1"]),
    R("repro mnist-local2d --query-block 0 0", ["--query-block 0 0", "divide the 28 x 28", "e.g. 7 7"]),
    R("repro mnist-local2d --lr -1", ["lr", "> 0.0", "-1.0"]),
    R("repro act-parity --taus nan", ["--taus", "finite", "[nan]", "e.g. --taus"]),
    R("repro act-parity --taus -1", ["--taus", "got [-1.0]"]),
    R("repro act-parity --steps 0", ["--steps", ">= 1", "got 0"]),
    R("repro act-parity --dim 0", ["--dim", ">= 1", "got 0"]),
    R("repro act-parity --max-ponder 0", ["--max-ponder", "got 0"]),
    R("repro act-parity --eps 2", ["eps", "(0.0, 1.0)", "2.0"]),
    R("repro act-parity --threads -1", ["--threads", "got -1"]),
    R("repro ut-algorithmic --tasks nosuch", ["['nosuch']", "choose from copy, reverse, addition"]),
    R("repro ut-algorithmic --models nosuch", ["['nosuch']", "choose from lstm"]),
    R("repro ut-algorithmic --depth 0", ["--depth", ">= 1", "got 0"]),
    R("repro ut-algorithmic --train-len 0", ["--train-len", "got 0"]),
    R("repro ut-algorithmic --device tpu", ["'tpu'", "valid: auto, cpu, cuda"]),
    R("repro ut-algorithmic --heads 3", ["--d-model 128", "divisible by --heads 3"]),
    R("repro ut-algorithmic --residual sandwich", ["'sandwich'", "'pre_norm', 'post_norm'"]),
    R("repro al-rfou-aux --corpus nosuch --steps 1", ["'nosuch'", "known corpora"]),
    R("repro al-rfou-aux --seq-len 0", ["seq_len", ">= 1", "got 0"]),
    R("repro al-rfou-aux --dropout 2", ["dropout", "[0.0, 1.0)", "2.0"]),
    R("repro al-rfou-aux --time -1", ["--time", "> 0", "-1"]),
    R("repro al-rfou-aux --time soon", ["--time='soon'", "not a duration", "--help"]),
    R("repro al-rfou-aux --layers 0", ["--layers", ">= 2", "got 0"]),
    R("repro al-rfou-aux --runs nosuch", ["'nosuch'", "'all'"]),
    R("repro reverse-dictionary --gcide {d}/nothing.gz", ["{d}/nothing.gz", "not a file", "gcide.txt.gz"]),
    R("repro reverse-dictionary --beam -1", ["--beam", ">= 0", "got -1"]),
    R("repro reverse-dictionary --dropout 1.5", ["dropout", "1.5"]),
    R("repro reverse-dictionary --time-cap -1 --steps 1", ["--time-cap", "got -1.0", "use --time"]),
    R("repro reverse-dictionary --models nosuch", ["'nosuch'", "'lstm'"]),
    R("repro reverse-dictionary --steps 0", ["--steps", ">= 1", "got 0", "--time"]),
    R("repro nosuch", ["'nosuch'", "reformer-duplication", "--help"]),
    # -- bench ------------------------------------------------------------------------------
    R("bench attention --seq-lens 0", ["--seq-lens", ">= 1", "[0]"]),
    R("bench attention --patterns nosuch", ["['nosuch']", "choose from causal"]),
    R("bench attention --block-size x", ["'x'", "not a tile size", "auto"]),
    R("bench attention --threads -1", ["--threads", ">= 0", "got -1"]),
    R("bench attention --kernel dense", ["'dense'", "'blocksparse', 'flex'"]),
    R("bench flex-floor --seq-lens 100", ["--seq-lens [100]", "multiples of --block-size 128"]),
    R("bench flex-floor --patterns nosuch", ["['nosuch']", "choose from"]),
    R("bench train --d-model 0", ["--d-model", ">= 1", "got 0"]),
    R("bench train --d-model 32 --heads 3", ["--d-model 32", "divisible by --heads 3"]),
    R("bench train --precisions fp8", ["'fp8'", "'fp32', 'bf16'"]),
    R("bench train --min-time -1", ["--min-time", "> 0", "-1.0", "e.g. --min-time 8"]),
    R("bench train --min-time nan", ["--min-time", "finite", "nan"]),
    R("bench xl-eval --checkpoint {d}/nothing", ["{d}/nothing", "does not exist"]),
    R("bench xl-eval --seg-len 0", ["--seg-len", ">= 1", "got 0"]),
    R("bench lsh --lengths 0", ["--lengths", "positive", "[0]"]),
    R("bench lsh --bucket-size 0", ["--bucket-size", "positive", "[0]"]),
    R("bench lsh --rounds 0", ["--rounds", "positive"]),
    R("bench reversible --depths 0", ["--depths", "positive", "[0]"]),
    R("bench reversible --seq-len 0", ["--seq-len", ">= 1", "got 0"]),
    R("bench sdpa-tiles --tiles bogus", ["'bogus'", "not BxK", "128x3"]),
    R("bench sdpa-tiles --seq-len 0", ["--seq-len", ">= 1", "got 0"]),
    R("bench peers --shapes bogus", ["'bogus'", "D:LAYERS:HEADS:SEQ:BATCH", "64:2:2:32:2"]),
    R("bench peers --rounds 0", ["--rounds", ">= 1", "got 0"]),
    R("bench recipe --corpus nosuch", ["'nosuch'", "known corpora"]),
    R("bench recipe --heads 3 --d-model 32", ["--d-model 32", "divisible by --heads 3"]),
    R("bench recipe --steps 0", ["--steps", ">= 1", "got 0"]),
    R("bench generate --prompt-len 0", ["--prompt-len", ">= 1", "got 0"]),
    R("bench generate --batches 0", ["--batches", ">= 1", "[0]"]),
    R("bench generate --vocab 0", ["--vocab", ">= 1", "got 0"]),
    # -- arena ------------------------------------------------------------------------------
    R("arena --members nosuch", ["'nosuch'", "tfamily members"]),
    R("arena --members gpt:bogus", ["'gpt:bogus'", "gpt:causal"]),
    R("arena --tasks nosuch", ["'nosuch'", "tasks: listops"]),
    R("arena --seeds 0", ["--seeds", ">= 1", "got 0"]),
    R("arena --steps 0", ["--steps", ">= 1", "got 0", "e.g. --steps 20"]),
    R("arena --length listops=0", ["--length listops", ">= 2", "got 0"]),
    R("arena --length bogus", ["--length bogus", "TASK=N", "listops=512"]),
    R("arena --lr nan", ["--lr", "finite", "nan"]),
    R("arena --shard 2/2", ["--shard 2/2", "0 <= i < n"]),
    R("arena --time soon", ["'soon'", "not a duration"]),
    R("arena --heads 0", ["--heads", ">= 1", "got 0"]),
    R("arena --batch-size 0", ["--batch-size", ">= 1", "got 0"]),
    R("arena --d-model 30 --heads 4", ["--d-model 30", "divisible by --heads 4"]),
    R("arena --threads 0", ["--threads", ">= 1", "got 0"]),
    R("arena --eval-examples 0", ["--eval-examples", ">= 1", "got 0"]),
    R("arena --precision fp8", ["'fp8'", "'fp32', 'bf16'"]),
    R("arena --flops 0", ["--flops", "> 0", "got 0.0", "e.g. --flops 2e12"]),
    R("arena --flops 1000", ["--flops 1e+03", "cannot pay for one training step of gpt on listops",
                             "--flops of at least"]),
    R("arena --flops 1e12 --time 1m", ["give --time or --flops, not both"]),
    R("arena --steps many", ["--steps many", "N or TASK=N", "--steps 600 text=150"]),
    R("arena --steps text=0", ["--steps text", ">= 1", "got 0"]),
    R("arena --speed-rounds -1", ["--speed-rounds", ">= 0", "got -1", "0 to skip"]),
    R("arena --tasks lm --length lm=3000000", ["--length lm=3000000", "validation split of gcide", "lower --length lm"]),
    R("arena speed {d}", ["no finished arena cells", "{d}", "tfamily arena --out"]),
    R("arena speed --rounds 0 {d}", ["--rounds", ">= 1", "got 0", "e.g. --rounds 5"]),
    R("arena merge --out {d}/m {d}/nothing", ["{d}/nothing", "does not exist", "--out of an arena run"]),
    R("arena merge --out {d}/m {d}", ["no finished arena cells", "{d}", "tfamily arena"]),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_every_tool_refuses_bad_input_in_one_line_naming_the_value_and_the_fix(row, tmp_path, capsys):
    d = str(tmp_path)
    argv = [a.replace("{d}", d) for a in row.argv]
    if argv[0] in ("repro", "bench", "arena") and "--out" not in argv and len(argv) > 2:
        argv += ["--out", str(tmp_path / "o")]
    if argv[:2] == ["repro", "reformer-duplication"] and "--jobs" not in argv:
        argv += ["--jobs", "1"]  # no worker processes in the test
    last = run_row(row, argv, capsys)
    for w in row.words:
        w = w.replace("{d}", d)
        assert w in last, (w, last)
