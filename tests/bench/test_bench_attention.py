"""`tfamily bench attention` writes rows with the required fields, a CSV, a JSON list
and a PNG plot (tiny sizes; the real run is in the notes)."""
from __future__ import annotations

import json

from tfamily.cli import main


def test_bench_attention_json_rows_and_plot(tmp_path, capsys):
    plot = tmp_path / "attention.png"
    code = main(["bench", "attention", "--seq-lens", "128", "256", "--heads", "2", "--d-head", "16",
                 "--block-size", "32", "--patterns", "sliding_window", "strided_heads",
                 "--out", str(tmp_path), "--plot", str(plot), "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["pattern"] for r in rows} == {"dense_causal_sdpa", "sliding_window", "strided_heads"}
    assert {r["seq_len"] for r in rows} == {128, 256}
    for r in rows:
        assert {"pattern", "seq_len", "density", "fwd_ms", "fwd_bwd_ms", "peak_mb", "vs_target"} <= set(r)
        assert 0 < r["density"] <= 1 and r["fwd_ms"] > 0 and r["fwd_bwd_ms"] > 0
    window = {r["seq_len"]: r for r in rows if r["pattern"] == "sliding_window"}
    assert window[256]["density"] < window[128]["density"]  # a fixed window thins out with L
    assert plot.stat().st_size > 0 and (tmp_path / "attention.csv").exists()
    assert json.loads((tmp_path / "attention.json").read_text()) == rows


def test_bench_attention_rejects_unknown_patterns(tmp_path, capsys):
    code = main(["bench", "attention", "--patterns", "nope", "--out", str(tmp_path)])
    assert code == 2 and "nope" in capsys.readouterr().err


def test_bench_attention_names_the_code_that_ran_and_times_causal_tiles(tmp_path, capsys, monkeypatch):
    from tfamily.nn.kernels import native
    code = main(["bench", "attention", "--seq-lens", "128", "--heads", "2", "--d-head", "16",
                 "--block-size", "32", "--patterns", "causal_tiles", "bigbird", "--out", str(tmp_path), "--json"])
    assert code == 0
    rows = {r["pattern"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["dense_causal_sdpa"]["impl"] == "sdpa"
    expected = "compiled" if native.ops() is not None else "pytorch"
    assert rows["causal_tiles"]["impl"] == rows["bigbird"]["impl"] == expected
    assert rows["causal_tiles"]["causal_density"] == 1.0 and rows["causal_tiles"]["fwd_bwd_ms"] > 0
    monkeypatch.setenv("TFAMILY_NATIVE", "0")  # the workers inherit it
    assert main(["bench", "attention", "--seq-lens", "128", "--heads", "2", "--d-head", "16", "--block-size", "32",
                 "--patterns", "bigbird", "--out", str(tmp_path), "--json"]) == 0
    rows = {r["pattern"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["bigbird"]["impl"] == "pytorch"


def test_bench_attention_in_bfloat16_names_the_bf16_kernel(tmp_path, capsys, monkeypatch):
    from tfamily.nn.kernels import native
    for tiles, impl in (("1", "compiled-bf16"), ("0", "compiled")):
        monkeypatch.setenv("TFAMILY_BF16_TILES", tiles)  # the workers inherit it
        assert main(["bench", "attention", "--seq-lens", "128", "--heads", "2", "--d-head", "16", "--block-size",
                     "32", "--patterns", "sliding_window", "--dtype", "bfloat16", "--out", str(tmp_path),
                     "--json"]) == 0
        rows = {r["pattern"]: r for r in json.loads(capsys.readouterr().out)}
        assert {r["dtype"] for r in rows.values()} == {"bfloat16"}
        assert rows["sliding_window"]["impl"] == (impl if native.ops() is not None else "pytorch")
        assert rows["sliding_window"]["fwd_bwd_ms"] > 0 and rows["dense_causal_sdpa"]["fwd_bwd_ms"] > 0


def test_ratios_against_the_fastest_dense_time_of_the_run():
    from tfamily.bench.attention import add_ratios
    rows = [dict(seq_len=L, dtype="float32", causal_density=d, fwd_bwd_ms=t, dense_fwd_bwd_ms=dense)
            for L, d, t, dense in ((16, 1.0, 100.0, 100.0), (16, 0.1, 30.0, 200.0), (16, 0.1, 15.0, 150.0),
                                   (32, 0.1, 20.0, 100.0))]
    add_ratios(rows)
    assert [r["vs_target"] for r in rows] == [1.0, 1.5, 1.0, 2.0]
    assert [r["dense_best_ms"] for r in rows] == [100.0, 100.0, 100.0, 100.0]
    # a worker whose own dense call ran slow is held to the fastest dense call of its length
    assert [r["vs_target_best_dense"] for r in rows] == [1.0, 3.0, 1.5, 2.0]


def test_bench_attention_rounds_option(tmp_path, capsys):
    assert main(["bench", "attention", "--rounds", "-1", "--out", str(tmp_path)]) == 2
    assert "--rounds" in capsys.readouterr().err
    assert main(["bench", "attention", "--seq-lens", "128", "--heads", "2", "--d-head", "16", "--block-size", "32",
                 "--patterns", "sliding_window", "--rounds", "2", "--out", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["pattern"] for r in rows} == {"dense_causal_sdpa", "sliding_window"}


def test_alternating_rounds_reset_untimed_before_every_call():
    """The bench clears the leaves' gradients before each timed fwd+bwd, as zero_grad does in
    training, so no call pays for adding into the previous call's gradients."""
    import torch

    from tfamily.bench.attention import _clear_grads, _time_alternating
    x = torch.ones(3, requires_grad=True)
    seen, calls = [], []

    def step(name):
        seen.append((name, x.grad is None))
        (x * 2).sum().backward()

    best = _time_alternating({"a": lambda: step("a"), "b": lambda: step("b")}, reps=2, cuda=False, warm=True,
                             reset=lambda: calls.append(1) or _clear_grads(x))
    assert set(best) == {"a", "b"} and len(calls) == 4
    assert seen[2:] == [("a", True), ("b", True), ("a", True), ("b", True)]  # every timed call starts clean
    assert torch.equal(x.grad, torch.full((3,), 2.0))  # one call's gradient, not an accumulation
