"""`tfamily repro act-parity` at a toy size: the parity data is what section 3.1 says, and the
command trains every setting and writes its tables and plot."""
from __future__ import annotations

import json

import pytest
import torch

from tfamily.repro import REPROS, act_parity
from tfamily.cli import main


def test_parity_data_follows_the_paper():
    x, y, k = act_parity.parity_batch(500, 64, torch.Generator().manual_seed(0))
    assert x.shape == (500, 64) and set(x.unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert torch.equal((x != 0).sum(dim=1), k) and k.min() >= 1 and k.max() <= 64
    assert k.unique().numel() > 40  # k is spread over 1..64
    for row, target in zip(x, y):
        assert target.item() == int((row == 1).sum()) % 2
    assert 0.35 < float(y.mean()) < 0.65


def test_command_runs_and_writes_its_files(tmp_path, capsys):
    out = tmp_path / "parity"
    rc = main(["repro", "act-parity", "--taus", "0.01", "0.001", "--steps", "4", "--dim", "8", "--hidden", "8",
               "--batch", "8", "--max-ponder", "5", "--eval-sequences", "32", "--eval-every", "2",
               "--out", str(out), "--json"])
    assert rc == 0 and REPROS["act-parity"] == "tfamily.repro.act_parity"
    rows = json.loads(capsys.readouterr().out)
    assert [r["setting"] for r in rows] == ["no_act", "tau=0.01", "tau=0.001"]
    assert all(r["steps"] == 4 and 0.0 <= r["sequence_error"] <= 1.0 for r in rows)
    assert rows[0]["mean_ponder"] == 1.0  # without ACT every sequence gets one step
    assert all(1.0 <= r["mean_ponder"] <= 5.0 for r in rows[1:])
    for stem in ("table", "ponder", "curves"):
        assert (out / f"{stem}.json").exists() and (out / f"{stem}.csv").exists()
    ponder = json.loads((out / "ponder.json").read_text())
    assert len(ponder) == 3 * 8 and {r["nonzero"] for r in ponder} == set(range(1, 9))
    curves = json.loads((out / "curves.json").read_text())
    assert [c["step"] for c in curves if c["setting"] == "no_act"] == [2, 4]
    assert (out / "act_parity.png").stat().st_size > 1000


def test_no_baseline_trains_only_the_taus(tmp_path, capsys):
    rc = main(["repro", "act-parity", "--taus", "0.001", "--no-baseline", "--steps", "2", "--dim", "8",
               "--hidden", "8", "--batch", "8", "--max-ponder", "3", "--eval-sequences", "16",
               "--out", str(tmp_path), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["setting"] for r in rows] == ["tau=0.001"]


def test_time_budget_stops_training(tmp_path, capsys):
    rc = main(["repro", "act-parity", "--taus", "0.01", "--steps", "100000", "--time", "0.5", "--dim", "8",
               "--hidden", "8", "--batch", "8", "--max-ponder", "3", "--eval-sequences", "16",
               "--out", str(tmp_path), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and all(0 < r["steps"] < 100000 for r in rows)


@pytest.mark.parametrize("argv,match", [(["--steps", "0"], "--steps"), (["--taus", "-1"], "--taus")])
def test_bad_arguments_are_refused(tmp_path, capsys, argv, match):
    assert main(["repro", "act-parity", *argv, "--out", str(tmp_path)]) == 2
    assert match in capsys.readouterr().err


def _flat_parity(args, tau):
    """The reproduction's own loop before it joined the shared trainer: the flat reference."""
    from torch import nn
    torch.manual_seed(args.seed)
    net = act_parity.model(args, act=tau is not None)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed + 1)
    bce = nn.BCEWithLogitsLoss()
    for _ in range(args.steps):
        x, y, _ = act_parity.parity_batch(args.batch, args.dim, gen)
        out = net(x[:, None])
        loss = bce(out.y[:, 0, 0], y) + (tau or 0.0) * out.ponder.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
    return net


@pytest.mark.parametrize("tau", [None, 0.01])
def test_task_on_the_shared_loop_learns_exactly_as_the_flat_loop(tmp_path, tau):
    import argparse

    from tfamily.train import checkpoint
    p = argparse.ArgumentParser()
    act_parity.add_args(p)
    args = p.parse_args(["--steps", "7", "--dim", "8", "--hidden", "8", "--batch", "8", "--max-ponder", "5",
                         "--eval-every", "3", "--lr", "0.01", "--seed", "5", "--out", str(tmp_path)])
    data = act_parity.parity_batch(16, args.dim, torch.Generator().manual_seed(args.seed + 2))
    row, _, curve = act_parity.train_setting(args, tau, data, lambda m: None)
    assert row["steps"] == 7 and [c["step"] for c in curve] == [3, 6]  # evaluations leave training as it was
    net = act_parity.ParityNet(args, tau)
    checkpoint.load(tmp_path / "runs" / ("no_act" if tau is None else f"tau{tau:g}")).load_weights(net)
    want = _flat_parity(args, tau).state_dict()
    got = net.act.state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


TINY = ["repro", "act-parity", "--taus", "0.01", "0.001", "--steps", "2", "--dim", "8", "--hidden", "8",
        "--batch", "8", "--max-ponder", "3", "--eval-sequences", "16", "--eval-every", "2"]


def _trained(out) -> dict:
    return {p.parent.name: p.stat().st_mtime_ns for p in sorted((out / "runs").glob("*/cell.json"))}


def test_the_settings_are_grid_cells_a_rerun_skips_and_two_shards_cover_once(tmp_path, capsys):
    out = tmp_path / "grid"
    assert main([*TINY, "--out", str(out)]) == 0
    table = json.loads((out / "table.json").read_text())
    first = _trained(out)
    assert list(first) == ["no_act", "tau0.001", "tau0.01"]
    capsys.readouterr()
    assert main([*TINY, "--out", str(out)]) == 0  # nothing retrained, the same table
    assert _trained(out) == first and capsys.readouterr().err.count(": skipped,") == 3
    assert json.loads((out / "table.json").read_text()) == table
    (out / "runs" / "tau0.01" / "cell.json").unlink()  # a grid killed during its last cell
    assert main([*TINY, "--out", str(out)]) == 0
    again = _trained(out)
    assert [k for k in first if again[k] != first[k]] == ["tau0.01"]
    shared = tmp_path / "shards"
    assert main([*TINY, "--out", str(shared), "--shard", "0/2"]) == 0
    assert list(_trained(shared)) == ["no_act", "tau0.001"]  # cells 0 and 2 of the grid's order
    assert "1 of 3 cells not finished here" in capsys.readouterr().err
    assert main([*TINY, "--out", str(shared), "--shard", "1/2"]) == 0
    assert list(_trained(shared)) == ["no_act", "tau0.001", "tau0.01"]
    assert capsys.readouterr().err.count(": skipped,") == 0  # each cell ran once, in one shard
    rows = json.loads((shared / "table.json").read_text())
    assert [r["setting"] for r in rows] == ["no_act", "tau=0.01", "tau=0.001"]
    assert [r["sequence_error"] for r in rows] == [r["sequence_error"] for r in table]
    assert main([*TINY[:6], "3", *TINY[7:], "--out", str(out)]) == 2  # a changed setting: refused, not mixed in
    assert "was planned with other settings (steps: saved 2, asked 3)" in capsys.readouterr().err
