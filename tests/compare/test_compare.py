"""`tfamily compare`, `tfamily plot curves` and the `rl compare` alias: the table holds each run's
final metrics, the curves are the runs' own logged rows placed on the right clock, and a directory
that is not a finished run is refused in one line."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from tfamily import compare
from tfamily.cli import main

TRAIN_FIELDS = ["step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"]


def write_run(root: Path, result: dict, train: list[dict], evals: list[dict], config: dict) -> Path:
    root.mkdir(parents=True)
    (root / "result.json").write_text(json.dumps(result))
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    for name, rows in (("train.csv", train), ("eval.csv", evals)):
        fields = list(dict.fromkeys(k for r in rows for k in r)) or ["step"]
        with open(root / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
    return root


def lm_run(root: Path) -> Path:
    """A language-model run logged every 10 steps, evaluated at 15 (between two logs) and 25 (past the last)."""
    train = [{"step": 10, "tokens": 640, "loss": 3.0, "elapsed_s": 1.0},
             {"step": 20, "tokens": 1280, "loss": 2.5, "elapsed_s": 3.0}]
    evals = [{"step": 15, "tokens": 960, "loss": 2.8, "bpc": 4.0}, {"step": 25, "tokens": 1600, "loss": 2.4, "bpc": 3.5}]
    result = {"member": "gpt", "params": 1000, "steps": 25, "tokens": 1600, "unit": "tokens", "train_s": 3.5,
              "train_loss": 2.45, "val_loss": 2.4, "val_bpc": 3.5, "val_ppl": 11.0, "val_acc": 0.3}
    return write_run(root, result, train, evals, {"member": "gpt", "train": {"seed": 7}})


def rl_run(root: Path) -> Path:
    """An RL run: two rollouts of 16 env steps, two PPO updates each (one train.csv row per update)."""
    train = [{"step": s, "tokens": t, "loss": 0.2, "elapsed_s": e, "mean_return": r, "episodes": 8}
             for s, t, e, r in [(1, 16, 0.5, -0.5), (2, 16, 0.7, -0.5), (3, 32, 1.5, 0.25), (4, 32, 1.9, 0.25)]]
    result = {"member": "lstm", "params": 600, "steps": 4, "tokens": 32, "unit": "env_steps", "train_s": 1.9,
              "train_loss": 0.2, "val_loss": 0.24, "val_bpc": None, "val_return": 1.0, "val_acc": float("nan")}
    config = {"member": "lstm", "data": {"task": "tfamily/RememberFirst-v0"}, "train": {"seed": 3}}
    return write_run(root, result, train, [{"step": 4, "tokens": 32, "loss": 0.24}], config)


def test_lm_curves_sit_on_the_runs_clock(tmp_path):
    run = compare.load(lm_run(tmp_path / "lm"))
    (train, val) = compare.lines(run)
    assert train == ("train", [10, 20], [1.0, 3.0], [3.0, 2.5])
    # step 15 halfway between the logs at 10 (1 s) and 20 (3 s); step 25 extrapolated at 0.2 s per step
    assert val[0] == "val" and val[1] == [15, 25] and val[2] == pytest.approx([2.0, 4.0]) and val[3] == [2.8, 2.4]
    ((kind, _, _, ys),) = compare.lines(run, bpc=True)
    assert kind == "val" and ys == [4.0, 3.5]


def test_a_run_too_short_to_log_ends_at_its_training_seconds(tmp_path):
    root = write_run(tmp_path / "short", {"steps": 4, "tokens": 64, "train_s": 2.0, "val_loss": 3.0}, [],
                     [{"step": 2, "loss": 3.5}, {"step": 4, "loss": 3.0}], {})
    ((kind, xs, ts, ys),) = [line for line in compare.lines(compare.load(root)) if line[0] == "val"]
    assert xs == [2, 4] and ts == pytest.approx([1.0, 2.0])


def test_rl_curve_is_one_point_per_rollout(tmp_path):
    run = compare.load(rl_run(tmp_path / "rl"))
    assert compare.lines(run) == [("train", [16, 32], [0.5, 1.5], [-0.5, 0.25])]
    row = compare.row(run)
    assert row["env"] == "tfamily/RememberFirst-v0" and row["seed"] == 3 and row["env_steps"] == 32
    assert (row["final_return"], row["max_return"], row["val_return"]) == (0.25, 0.25, 1.0)
    assert row["val_acc"] is None and row["val_bpc"] is None  # NaN and null are no numbers


def test_table_of_mixed_runs(tmp_path, capsys):
    lm, rl = lm_run(tmp_path / "lm"), rl_run(tmp_path / "rl")
    png = tmp_path / "out" / "curves.png"
    assert main(["compare", str(lm), str(rl), "--out", str(png)]) == 0
    out = capsys.readouterr()
    head, lm_line, rl_line, *differs, plot_line = out.out.splitlines()
    assert differs[0] == "differs:" and any(line.split()[0] == "train.seed" for line in differs[1:])
    assert out.err.count("\n") == 1 and "differ in data, seed" in out.err
    cols = head.split()
    assert cols[:7] == ["run", "member", "env", "seed", "steps", "params", "train_s"]
    assert {"val_loss", "val_bpc", "final_return", "max_return", "val_return"} <= set(cols)
    assert "val_ppl" not in cols and "unit" not in cols
    assert lm_line.split()[:2] == [str(lm), "gpt"] and "2.4000" in lm_line.split()
    assert rl_line.split()[:3] == [str(rl), "lstm", "tfamily/RememberFirst-v0"]
    assert plot_line == f"plot: {png}" and png.stat().st_size > 1000


def test_a_column_no_run_has_is_dropped(tmp_path):
    rows = [compare.row(compare.load(rl_run(tmp_path / "rl")))]
    assert "val_bpc" not in compare.columns(rows) and "val_acc" not in compare.columns(rows)


def test_json_and_plot_curves(tmp_path, capsys):
    lm = lm_run(tmp_path / "lm")
    assert main(["compare", str(lm), "--json", "--out", str(tmp_path / "a.png")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plot"] == str(tmp_path / "a.png")
    assert out["runs"] == [{**compare.row(compare.load(lm))}] and out["runs"][0]["val_loss"] == 2.4
    assert main(["plot", "curves", str(lm), "--bpc", "--out", str(tmp_path / "b.png")]) == 0
    assert capsys.readouterr().out == f"plot: {tmp_path / 'b.png'}\n" and (tmp_path / "b.png").stat().st_size > 1000


@pytest.mark.parametrize("command", [["compare"], ["plot", "curves"], ["rl", "compare"]])
def test_not_a_finished_run_is_one_line(command, tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main([*command, str(missing), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"run directory '{missing}' does not exist" in err and "--out" in err
    (tmp_path / "killed").mkdir()
    assert main([*command, str(tmp_path / "killed"), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no result.json" in err and "--resume" in err
    assert not (tmp_path / "c.png").exists()


def test_reads_what_the_training_loop_writes(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    out = tmp_path / "run"
    assert main(["train", "--member", "gpt", f"data.corpus={text}", "model.d_model=16", "model.heads.n_heads=2",
                 "model.depth.n_layers=1", "data.seq_len=16", "train.batch_size=2", "train.threads=1",
                 "train.log_every=1", "train.eval_every=2", "train.eval_tokens=64", "train.eval_batch_size=2",
                 "train.progress=false", "--steps", "4", "--precision", "fp32", "--out", str(out)]) == 0
    capsys.readouterr()
    run = compare.load(out)
    result = json.loads((out / "result.json").read_text())
    row = compare.row(run)
    assert (row["steps"], row["val_loss"], row["train_loss"]) == (4, result["val_loss"], result["train_loss"])
    train, val = compare.lines(run)
    assert train[1] == [1, 2, 3, 4] and val[1] == [2, 4]
    elapsed = {int(r["step"]): float(r["elapsed_s"]) for r in run.train}
    assert val[2] == pytest.approx([elapsed[2], elapsed[4]])  # logged every step: read off exactly
    assert val[3][-1] == pytest.approx(result["val_loss"])


# -- what differs ------------------------------------------------------------------------------------
def member_run(root: Path, member: str, *, model: dict | None = None, result: dict | None = None,
               data: dict | None = None, train: dict | None = None) -> Path:
    """A finished text run of ``member`` at size small: a config as `tfamily train` writes it."""
    config = {"member": member, "size": "small", "model": model or {},
              "data": {"corpus": "tinyshakespeare", "vocab": None, "seq_len": 128, **(data or {})},
              "train": {"seed": 0, "max_steps": 100, "time_budget": None, "threads": "auto", "precision": "auto",
                        "out": str(root), **(train or {})}}
    evals = [{"step": 50, "loss": 3.0, "bpc": 4.3}, {"step": 100, "loss": 2.5, "bpc": 3.6}]
    return write_run(root, {"member": member, "steps": 100, "train_s": 9.0, "val_loss": 2.5, **(result or {})},
                     [{"step": 100, "tokens": 1, "loss": 2.6, "elapsed_s": 9.0}], evals, config)


def _png_height(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[20:24], "big")  # the IHDR chunk: width, then height


def test_two_members_differ_in_their_own_fields_and_no_warning(tmp_path, capsys):
    gpt, reformer = member_run(tmp_path / "gpt", "gpt"), member_run(tmp_path / "reformer", "reformer")
    assert main(["compare", str(gpt), str(reformer), "--json", "--out", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr()
    report = json.loads(out.out)
    diffs = {d["key"]: d for d in report["differences"]}
    assert diffs["model.kernel.name"] == {"key": "model.kernel.name", "values": ["sdpa", "lsh"], "own": True}
    assert diffs["model.heads.shared_qk"]["own"] and diffs["model.depth.name"]["values"] == ["stack", "reversible"]
    assert all(d["own"] for d in diffs.values()) and report["warning"] is None and out.err == ""


def test_anything_else_that_differs_is_listed_and_warned_in_one_line(tmp_path, capsys):
    a = member_run(tmp_path / "a", "gpt", result={"threads": 1, "precision": "fp32"})
    b = member_run(tmp_path / "b", "gpt", model={"d_model": 64}, data={"vocab": "byte"},
                   train={"seed": 1, "time_budget": "60s"}, result={"threads": 2, "precision": "bf16"})
    c = member_run(tmp_path / "c", "gpt", train={"threads": 1})  # an old run: no threads in result.json
    assert main(["compare", str(a), str(b), str(c), "--out", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr()
    differs = out.out.split("differs:\n")[1].splitlines()[:-1]
    rows = {line.split()[0]: line.split(None, 1)[1] for line in differs}
    assert rows["train.seed"] == "0 | 1 | 0" and rows["train.threads"] == "1 | 2 | 1"
    assert rows["train.precision"] == "fp32 | bf16 | auto" and rows["data.vocab"] == "null | byte | null"
    assert rows["model.d_model"] == "128 | 64 | 128" and rows["train.time_budget"] == "null | 60s | null"
    assert not any("members' own" in line for line in differs)
    (line,) = out.err.splitlines()
    assert line.startswith("tfamily compare: warning: the runs differ in ")
    for kind in ("vocabulary", "budget", "seed", "threads", "precision", "model.d_model"):
        assert kind in line, kind


def test_an_override_on_a_members_axis_is_not_the_members_own(tmp_path, capsys):
    gpt = member_run(tmp_path / "gpt", "gpt", model={"heads": {"shared_qk": True}})
    reformer = member_run(tmp_path / "reformer", "reformer")
    assert main(["compare", str(gpt), str(reformer), "--json", "--out", str(tmp_path / "c.png")]) == 0
    report = json.loads(capsys.readouterr().out)
    diffs = {d["key"]: d["own"] for d in report["differences"]}
    assert diffs["model.kernel.name"] and "model.heads.shared_qk" not in diffs  # equal: not listed
    gpt2 = member_run(tmp_path / "gpt2", "gpt", model={"kernel": {"name": "dense"}})
    assert main(["compare", str(gpt2), str(reformer), "--json", "--out", str(tmp_path / "c.png")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {d["key"]: d["own"] for d in report["differences"]}["model.kernel.name"] is False
    assert "model.kernel.name" in report["warning"]


def test_runs_on_other_data_or_vocabularies_get_their_own_panels(tmp_path, capsys):
    a, b = member_run(tmp_path / "a", "gpt"), member_run(tmp_path / "b", "gpt", train={"seed": 1})
    c = member_run(tmp_path / "c", "gpt", data={"corpus": "kjv"})
    d = member_run(tmp_path / "d", "gpt", data={"vocab": "bpe:512"})
    runs = [compare.load(r) for r in (a, b, c, d)]
    assert compare.panel(runs[0]) == compare.panel(runs[1]) and len({compare.panel(r) for r in runs}) == 3
    one, three = compare.plot(runs[:2], tmp_path / "one.png"), compare.plot(runs, tmp_path / "three.png")
    assert _png_height(three) == 3 * _png_height(one)


@pytest.mark.parametrize("command", [["compare"], ["plot", "curves"]])
@pytest.mark.parametrize("out, words", [("fig", ["--out {d}/fig has no suffix", "{d}/fig.png"]),
                                        ("fig.docx", [".docx", "not an image format", "png"]),
                                        ("", ["is a directory", "{d}/curves.png"])])
def test_out_must_name_a_figure_file(command, out, words, tmp_path, capsys):
    lm = lm_run(tmp_path / "lm")
    assert main([*command, str(lm), "--out", f"{tmp_path}/{out}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    for w in words:
        assert w.replace("{d}", str(tmp_path).rstrip("/")) in err, (w, err)


def test_nothing_to_draw_is_refused_naming_the_run(tmp_path, capsys):
    empty = write_run(tmp_path / "empty", {"steps": 1, "train_s": 0.1, "val_loss": 3.0}, [], [], {"member": "gpt"})
    rl, synthetic = rl_run(tmp_path / "rl"), write_run(
        tmp_path / "copy", {"steps": 2, "val_loss": 1.0}, [{"step": 1, "loss": 2.0, "elapsed_s": 0.1}],
        [{"step": 2, "loss": 1.0}], {"member": "gpt", "data": {"task": "copy"}})
    for argv, words in ((["plot", "curves", str(empty)], [str(empty), "no rows", "train.log_every=1"]),
                        (["plot", "curves", str(rl), "--bpc"], ["--bpc", str(rl), "RL run", "drop --bpc"]),
                        (["compare", str(rl), "--bpc"], ["--bpc", str(rl), "RL run"]),
                        (["plot", "curves", str(synthetic), "--bpc"], [str(synthetic), "no evaluation with bits"])):
        assert main([*argv, "--out", str(tmp_path / "p.png")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and all(w in err for w in words), (words, err)
    assert not (tmp_path / "p.png").exists()
    assert main(["compare", str(empty), "--out", str(tmp_path / "p.png")]) == 0  # the table still has its row
