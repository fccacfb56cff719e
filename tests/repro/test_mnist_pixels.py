"""`tfamily repro mnist-local2d`: a tiny end-to-end run through the shared training loop (files,
finite bpd, PNGs, cached decoding equal to full recomputation over a whole image), the
generation order each model uses, and argument validation. No timing assertions."""
from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from tfamily import cli
from tfamily.repro import mnist_pixels
from tfamily.nn.patterns import resolve


def _need_mnist():
    from tfamily.data import DataNotFoundError, find_file
    try:
        find_file("t10k-images-idx3-ubyte.gz", None)
    except DataNotFoundError as e:
        pytest.fail(f"MNIST t10k is needed (`make test` sets TFAMILY_DATA to ../shared/data): {e}")


def args(**kw):
    p = cli.Parser()  # the renamed options (--budget, --max-steps) need the CLI's parser
    mnist_pixels.add_args(p)
    a = p.parse_args([])
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_tiny_run_writes_results_curves_and_sample_grids(tmp_path, capsys):
    _need_mnist()
    out = tmp_path / "mnist"
    argv = ["repro", "mnist-local2d", "--out", str(out), "--time", "60", "--steps", "2",
            "--train-images", "16", "--test-images", "4", "--curve-images", "2", "--eval-batch", "2",
            "--batch-size", "2", "--samples", "2", "--levels", "8", "--d-model", "16", "--layers", "1",
            "--heads", "2", "--threads", "1", "--json"]
    threads = torch.get_num_threads()
    try:  # one thread: on a loaded 2-core machine two threads make these tiny ops ~7x slower
        assert cli.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    rows = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in rows] == ["local_2d", "dense"]
    for r in rows:
        assert math.isfinite(r["test_bpd"]) and 0 < r["test_bpd"] < 2 * math.log2(8)
        assert r["steps"] == 2 and r["test_images"] == 4 and r["levels"] == 8
        # Cached one-pixel-at-a-time decoding over all 784 positions equals the full pass,
        # so sampling uses the pattern at the same absolute positions as training.
        assert r["cache_max_abs_diff"] < 1e-4
        assert (out / f"samples_{r['model']}.png").read_bytes()[:4] == b"\x89PNG"
    local, dense = rows
    assert local["params"] == dense["params"]                       # same model size
    assert (local["order"], dense["order"]) == ("block_raster_7x7", "raster")
    assert 0 < local["density_vs_causal"] < 1 == dense["density_vs_causal"]
    assert json.loads((out / "results.json").read_text()) == rows
    assert json.loads((out / "config.json").read_text())["levels"] == 8
    # Each model trained in its own run of the shared loop, which left its logs and checkpoint.
    for r in rows:
        run = out / r["model"]
        assert (run / "train.csv").is_file() and (run / "checkpoints").is_dir()
    with open(out / "curves.csv") as f:
        curve = list(csv.DictReader(f))
    assert [c["model"] for c in curve] == ["local_2d"] * 2 + ["dense"] * 2   # untrained and final
    with open(out / "results.csv") as f:
        assert [r["model"] for r in csv.DictReader(f)] == ["local_2d", "dense"]
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_local_model_reads_pixels_in_the_order_its_pattern_assumes():
    a = args(query_block=[4, 14], memory=[4, 7])
    order = mnist_pixels.order_for("local_2d", a)
    pattern = resolve(mnist_pixels.spec_for("local_2d", a).pattern)
    img = torch.arange(784).view(28, 28)
    r, c, _, _ = pattern.pixel(torch.arange(784))
    assert torch.equal(order.to_sequence(img), img[r, c])
    assert torch.equal(order.to_images(order.to_sequence(img)), img)
    assert order.block == (pattern.block_h, pattern.block_w) == (4, 14)
    assert mnist_pixels.order_for("dense", a).block is None


def test_both_specs_differ_only_in_pattern_and_kernel():
    a = args()
    local, dense = (mnist_pixels.spec_for(k, a).to_dict() for k in ("local_2d", "dense"))
    assert {k for k in local if local[k] != dense[k]} == {"pattern", "kernel"}
    assert local["kernel"]["params"]["block_size"] == 49


@pytest.mark.parametrize("argv, words", [
    (["--query-block", "5", "7"], ["--query-block 5 7", "28"]),
    (["--models", "local_2d", "sparse"], ["sparse", "dense"]),
    (["--d-model", "30", "--heads", "4"], ["--d-model 30", "--heads 4"]),
])
def test_bad_arguments_exit_2_naming_the_value(argv, words, capsys):
    assert cli.main(["repro", "mnist-local2d", *argv]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
