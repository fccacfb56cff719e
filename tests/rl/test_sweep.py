"""`tfamily rl sweep` at tiny sizes: torso labels and the b_g ablation, runs skipped when
finished, resumed bitwise after SIGKILL, continued to a larger --steps, refused when replanned
differently, parallel jobs equal to one; `tfamily rl table` on a real sweep from the CLI."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tfamily.cli import main
from tfamily.rl.sweep import Torso, parse_torso, plan, status, sweep
from tfamily.rl.table import runs, table
from tfamily.rl.toy import ID
from tfamily.rl.train import make_policy
from tfamily.train.metrics import read_csv

SETTINGS = {"n_envs": 4, "rollout": 4, "epochs": 1, "minibatches": 2, "eval_episodes": 4}
MODEL = {"d_model": 8, "n_layers": 1, "n_heads": 2, "mem_len": 4}
# 64 steps = 4 rollouts of 4 x 4 steps, 2 updates each: 8 updates, checkpoints at 4 and 8
ARGS = ["--envs", ID, "--seeds", "1", "--steps", "64", "--n-envs", "4", "--rollout", "4", "--epochs", "1",
        "--minibatches", "2", "--d-model", "8", "--layers", "1", "--heads", "2", "--mem-len", "4",
        "--ckpt-every", "4", "--set", "eval_episodes=4", "--no-progress"]


def _plan(out, members=("lstm", "gtrxl:gate_bias=0"), seeds=2, steps=32, **kw):
    return plan([ID], list(members), seeds, steps, out, settings=SETTINGS, model=MODEL, **kw)


# -- torso labels and the gate bias ----------------------------------------------------------------
def test_labels():
    assert parse_torso("gtrxl") == Torso("gtrxl", "gtrxl", None)
    t = parse_torso("gtrxl:gate_bias=0")
    assert (t.label, t.member, t.gate_bias) == ("gtrxl_bg0", "gtrxl", 0.0)
    assert parse_torso("gtrxl:gate_bias=2.5").label == "gtrxl_bg2.5"
    assert parse_torso("lstm").gate_bias is None


@pytest.mark.parametrize("text, message", [
    ("gtrxl:bias=0", "the only option is gate_bias=X"),
    ("gtrxl:gate_bias=abc", "is not a number"),
    ("gtrxl:gate_bias=inf", "must be finite"),
    ("", "is empty"),
])
def test_bad_labels(text, message):
    with pytest.raises(ValueError, match=message):
        parse_torso(text)


def test_gate_bias_reaches_every_gate(tmp_path):
    for members, want in ((["gtrxl"], 2.0), (["gtrxl:gate_bias=0"], 0.0), (["gtrxl:gate_bias=-1.5"], -1.5)):
        (run,) = _plan(tmp_path, members, seeds=1)
        policy, _ = make_policy(run.config(progress=False))
        biases = [p for n, p in policy.named_parameters() if n.endswith("b_g")]
        assert len(biases) == 2 * MODEL["n_layers"]  # one gate per sublayer (attention, feed-forward)
        assert all(torch.equal(b, torch.full_like(b, want)) for b in biases)


@pytest.mark.parametrize("member, message", [("lstm:gate_bias=0", "has no residual gate"),
                                             ("transformer_xl:gate_bias=0", "unknown residual.params")])
def test_gate_bias_refused_without_a_gate(tmp_path, member, message):
    with pytest.raises(ValueError, match=message):
        _plan(tmp_path, [member])


def test_bad_plans(tmp_path):
    with pytest.raises(ValueError, match="repeat an entry"):
        _plan(tmp_path, ["lstm", "lstm"])
    with pytest.raises(ValueError, match="--seeds must be"):
        _plan(tmp_path, seeds=0)
    with pytest.raises(ValueError, match="--shard"):
        _plan(tmp_path, shard="2/2")
    with pytest.raises(ValueError, match="fewer than one rollout"):
        _plan(tmp_path, steps=8)
    runs_ = _plan(tmp_path, seeds=3)
    assert [(r.torso.label, r.seed) for r in runs_[:3]] == [("lstm", 0), ("gtrxl_bg0", 0), ("lstm", 1)]
    assert [r.seed for r in _plan(tmp_path, seeds=3, shard="1/2")] == [0, 1, 2]  # runs 1, 3, 5 of 6


# -- real tiny sweeps -------------------------------------------------------------------------------
def test_sweep_runs_skips_continues_and_refuses_a_replan(tmp_path):
    lines: list[str] = []
    runs_ = _plan(tmp_path)
    sweep(runs_, progress=False, log=lines.append)
    assert [ln.split(": ")[1] for ln in lines[::2]] == ["training"] * 4
    assert all(status(r)[0] == "done" for r in runs_)
    results = [json.loads((r.dir / "result.json").read_text()) for r in runs_]
    assert [res["tokens"] for res in results] == [32] * 4
    stamps = [(r.dir / "result.json").stat().st_mtime_ns for r in runs_]
    lines.clear()
    sweep(runs_, progress=False, log=lines.append)
    assert len(lines) == 4 and all(ln.endswith("done at update 4, skipped") for ln in lines)
    assert [(r.dir / "result.json").stat().st_mtime_ns for r in runs_] == stamps
    longer = _plan(tmp_path, seeds=1, steps=48)  # a larger --steps continues the finished runs
    assert [status(r) for r in longer] == [("resume", 4)] * 2
    sweep(longer, progress=False, log=lines.append)
    assert [json.loads((r.dir / "result.json").read_text())["tokens"] for r in longer] == [48, 48]
    with pytest.raises(ValueError, match="lr: saved 0.0005, asked 0.001"):
        status(_plan(tmp_path, lr=1e-3)[0])
    table_ = {(e["label"], e["trials"]) for e in table(runs(tmp_path))}
    assert table_ == {("lstm", 2), ("gtrxl_bg0", 2)}


def _load_killing():
    spec = importlib.util.spec_from_file_location("_train_killing", Path(__file__).parents[1] / "train" / "killing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kill_when_flagged


def _sweep_cmd(out: Path, hooks: tuple[str, ...] = ()) -> list[str]:
    """``hooks``: the tests' hooks (tests/hooked_cli.py) installed in the sweep."""
    return [sys.executable, str(Path(__file__).parents[1] / "hooked_cli.py"), *hooks, "--", "rl", "sweep", *ARGS,
            "--members", "lstm", "gtrxl", "--out", str(out)]


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def test_sweep_resumes_a_killed_run_bitwise(tmp_path):
    full, killed, flag = tmp_path / "full", tmp_path / "killed", tmp_path / "halted"
    done = subprocess.run(_sweep_cmd(full), env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = subprocess.Popen(_sweep_cmd(killed, ("--halt", "step:6", str(flag))), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _load_killing()(proc, flag, "step 6 of the first run")
    again = subprocess.run(_sweep_cmd(killed), env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[1/2] tfamily/RememberFirst-v0 lstm s0: resuming from update 4" in again.stderr
    assert "[2/2] tfamily/RememberFirst-v0 gtrxl s0: training" in again.stderr
    for label in ("lstm", "gtrxl"):
        a, b = (_curve(d / "tfamily_RememberFirst-v0" / f"{label}-s0") for d in (full, killed))
        assert len(a) == 8 and a == b


def _curve(run: Path) -> list[tuple]:
    """train.csv without its timing columns."""
    return [(r["step"], r["tokens"], r["loss"], r["grad_norm"], r["mean_return"], r["episodes"])
            for r in read_csv(run / "train.csv")]


def test_cli_sweep_dry_run_table_and_bad_input(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["rl", "sweep", *ARGS, "--members", "gru", "--out", str(out), "--dry-run"]) == 0
    assert capsys.readouterr().out.strip().endswith("gru-s0: new")
    assert main(["rl", "sweep", *ARGS, "--members", "gru", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["rl", "table", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [e["label"] for e in report["entries"]] == ["gru"] and Path(report["plots"][ID]).is_file()
    for argv, message in ((["rl", "sweep", *ARGS, "--members", "gtrxl:bias=1", "--out", str(out)], "gate_bias=X"),
                          (["rl", "table", str(tmp_path / "none")], "does not exist")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


@pytest.mark.slow  # spawns two interpreters that import torch: ~20 s of CPU
def test_parallel_jobs_equal_one_job(tmp_path):
    threads = torch.get_num_threads()
    try:
        one, two = _plan(tmp_path / "one", seeds=1), _plan(tmp_path / "two", seeds=1)
        sweep(one, progress=False, threads=1, log=lambda line: None)
        lines: list[str] = []
        sweep(two, jobs=2, threads=1, log=lines.append)
        assert [ln.split(": ")[1] for ln in lines[:2]] == ["queued (new)"] * 2
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two):
        assert _curve(a.dir) == _curve(b.dir) and len(_curve(a.dir)) == 4


def test_train_gate_bias_flag(tmp_path, capsys):
    """`tfamily rl train --gate-bias` is the single-run form of a sweep's gtrxl:gate_bias=X."""
    out = tmp_path / "run"
    argv = ["rl", "train", "--env", ID, "--member", "gtrxl", "--gate-bias", "0", "--steps", "16", "--out", str(out),
            *ARGS[ARGS.index("--n-envs"):]]
    assert main(argv) == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["model"]["gate_bias"] == 0.0
    argv[argv.index("gtrxl")] = "lstm"
    assert main(argv) == 2
    assert "has no residual gate" in capsys.readouterr().err


def test_a_failing_run_does_not_stop_the_sweep(tmp_path, monkeypatch):
    import tfamily.rl.sweep as sweep_module
    real = sweep_module.execute

    def execute(run, **kw):
        if run.torso.label == "lstm":
            raise ValueError("loaded state dict contains a parameter group that doesn't match")
        return real(run, **kw)

    monkeypatch.setattr(sweep_module, "execute", execute)
    runs_, lines = _plan(tmp_path, seeds=1), []
    with pytest.raises(ValueError, match=r"1 of 2 runs failed .*lstm s0: failed: ValueError: loaded state"):
        sweep(runs_, progress=False, log=lines.append)
    assert lines[1].endswith("lstm s0: failed: ValueError: loaded state dict contains a parameter group "
                             "that doesn't match")
    assert [status(r)[0] for r in runs_] == ["new", "done"]  # the gtrxl_bg0 run after it trained
