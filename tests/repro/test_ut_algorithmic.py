"""`tfamily repro ut-algorithmic` at a toy size: the copy/reverse/addition pairs are what the
paper's t2t problems are, the accuracies count what they say, the randomized offsets reach the
positions, the LSTM baseline decodes what it was trained to score, and the command writes its
files and refuses bad arguments in one line."""
from __future__ import annotations

import json
from argparse import Namespace

import pytest
import torch

from tfamily.cli import main
from tfamily.repro import REPROS, ut_algorithmic as ua
from tfamily.models.generate import greedy_decode


def _int_lsb(digits: list[int]) -> int:
    return sum(d * 10 ** i for i, d in enumerate(digits))


@pytest.mark.parametrize("residual", ["pre_norm", "post_norm"])
@pytest.mark.parametrize("name", ["transformer", "ut", "ut_act"])
def test_residual_layout_reaches_every_block(name, residual):
    from tfamily.nn.residual import PostNorm, PreNorm

    args = _args()
    args.residual = residual
    kinds = {type(m) for m in ua.make_model(name, args).modules() if isinstance(m, (PreNorm, PostNorm))}
    assert kinds == {PreNorm if residual == "pre_norm" else PostNorm}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_copy_and_reverse_pairs(seed):
    gen = torch.Generator().manual_seed(seed)
    pairs = {t: ua.sample(t, 400, 40, gen) for t in ("copy", "reverse")}
    for task, rows in pairs.items():
        lengths = [len(s) for s, _ in rows]
        assert min(lengths) >= 1 and max(lengths) <= 40 and len(set(lengths)) > 30  # uniform over 1..40
        for src, tgt in rows:
            assert all(0 <= d <= 9 for d in src)
            assert tgt == (src if task == "copy" else src[::-1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_addition_is_least_significant_digit_first(seed):
    gen = torch.Generator().manual_seed(seed)
    for src, tgt in ua.sample("addition", 300, 40, gen):
        assert 3 <= len(src) <= 40 and src.count(ua.SEP) == 1
        cut = src.index(ua.SEP)
        a, b = src[:cut], src[cut + 1:]
        assert a and b and all(0 <= d <= 9 for d in a + b + tgt)
        assert _int_lsb(tgt) == _int_lsb(a) + _int_lsb(b)
        assert len(tgt) in (max(len(a), len(b)), max(len(a), len(b)) + 1)


def test_add_lsb_by_hand():
    assert ua.add_lsb([9, 9], [1]) == [0, 0, 1]  # 99 + 1 = 100
    assert ua.add_lsb([2, 1], [3]) == [5, 1]  # 12 + 3 = 15
    assert ua.add_lsb([0, 0], [0]) == [0, 0]  # leading zeros of the longer number are kept


def test_collate_frames_targets_with_bos_and_eos():
    batch = ua.collate([([1, 2, 3], [3, 2, 1]), ([4], [4])])
    assert batch["src"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert batch["src_padding"].tolist() == [[True] * 3, [True, False, False]]
    assert batch["tgt_in"].tolist() == [[ua.BOS, 3, 2, 1], [ua.BOS, 4, 0, 0]]
    assert batch["tgt_out"].tolist() == [[3, 2, 1, ua.EOS], [4, ua.EOS, 0, 0]]
    assert batch["tgt_padding"].tolist() == [[True] * 4, [True, True, False, False]]


def test_accuracy_on_hand_made_predictions():
    assert ua.accuracy([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 6]]) == (4 / 5, 1 / 2)
    assert ua.accuracy([[1, 2, 3, 4]], [[1, 2, 3]]) == (1.0, 0.0)  # too long: every symbol right, not exact
    assert ua.accuracy([[1]], [[1, 2, 3]]) == (1 / 3, 0.0)  # too short: the missing symbols are wrong
    assert ua.accuracy([[2, 1]], [[1, 2]]) == (0.0, 0.0)  # a symbol counts only at its own position
    with pytest.raises(ValueError, match="one prediction per target"):
        ua.accuracy([[1]], [[1], [2]])


def test_strip_cuts_at_the_first_eos():
    e, b = ua.EOS, ua.BOS
    assert ua.strip(torch.tensor([[b, 1, 2, e, 3], [b, 5, e, e, e], [b, 1, 1, 1, 1]])) == [[1, 2], [5], [1, 1, 1, 1]]


def _args(**kw) -> Namespace:
    base = dict(d_model=16, heads=2, depth=2, lstm_layers=1, residual="pre_norm")
    return Namespace(**{**base, **kw})


@pytest.mark.parametrize("name", ["transformer", "ut", "ut_act"])
def test_offsets_reach_every_transformer(name):
    """The batch's ``offset`` moves the input positions and, in the UT, the coordinate signal of
    every step on both sides."""
    from tfamily.nn.position.coordinate import Coordinate

    torch.manual_seed(0)
    net = ua.make_model(name, _args()).eval()
    seen = []
    for m in net.modules():
        if isinstance(m, Coordinate):
            m.register_forward_pre_hook(lambda mod, a: seen.append(a[2]))
    batch = ua.collate(ua.sample("copy", 4, 8, torch.Generator().manual_seed(1)))
    shift = torch.full((4,), 13)
    with torch.no_grad():
        base = net.loss(batch)[0]
        moved = net.loss({**batch, "offset": shift})[0]
        again = net.loss({**batch, "offset": 0})[0]
    assert not torch.allclose(base, moved) and torch.equal(base, again)
    if name != "transformer":
        assert seen and all(o is shift for o in seen[len(seen) // 3: 2 * len(seen) // 3])


@pytest.mark.parametrize("name", ["transformer", "ut", "ut_act"])
def test_offsets_per_example_move_each_row_by_its_own(name):
    """The default draw: one offset per example; row i then computes what it computes alone
    with its own offset, for the vanilla model and the UT's coordinate signal on both sides."""
    torch.manual_seed(0)
    net = ua.make_model(name, _args()).eval()
    b = ua.collate(ua.sample("reverse", 4, 8, torch.Generator().manual_seed(2)))
    shifts = torch.tensor([0, 13, 5, 40])
    with torch.no_grad():
        rows = net(b["src"], b["tgt_in"], src_padding=b["src_padding"], offset=shifts)
        for i in range(4):
            alone = net(b["src"][i:i + 1], b["tgt_in"][i:i + 1], src_padding=b["src_padding"][i:i + 1],
                        offset=int(shifts[i]))
            torch.testing.assert_close(rows[i:i + 1], alone, atol=1e-5, rtol=1e-5)


class _Shift(torch.nn.Module):
    """The flat reference's wrapper: positions moved by ``shift`` (an int or a (b,) tensor)."""

    def __init__(self, inner, coordinate=False):
        super().__init__()
        self.inner, self.coordinate, self.shift = inner, coordinate, 0

    def forward(self, x, *a):
        return self.inner(x, *a[:-1], a[-1] + self.shift) if a else self.inner(x, self.shift)


def _flat_train(task, name, args):
    """The reproduction's own loop before it joined the shared trainer (its offsets set on a
    wrapper around the model's position parts): the flat reference."""
    from tfamily.train.evaluate import to_device
    torch.manual_seed(args.seed)
    net = ua.make_model(name, args)
    if name != "lstm":
        net.position = _Shift(net.position)
    for side in (net.encoder, net.decoder) if name in ("ut", "ut_act") else ():
        side.coordinate = _Shift(side.coordinate)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / args.warmup))
    gen = torch.Generator().manual_seed(args.seed + 1)
    spread = 0 if args.no_offsets else args.test_len - args.train_len
    net.train()
    for _ in range(args.steps):
        rows = args.batch if args.offsets == "example" else 1
        shift = torch.randint(0, spread + 1, (rows,), generator=gen)
        for m in net.modules():
            if isinstance(m, _Shift):
                m.shift = shift if args.offsets == "example" else int(shift)
        out, _ = net.loss(to_device(ua.collate(ua.sample(task, args.batch, args.train_len, gen)), "cpu"))
        opt.zero_grad(set_to_none=True)
        out.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
    return {k.replace("inner.", ""): v for k, v in net.state_dict().items()}


@pytest.mark.parametrize("task,name,offsets", [("copy", "ut", "example"), ("addition", "ut_act", "example"),
                                               ("reverse", "transformer", "batch"), ("copy", "lstm", "example")])
def test_task_on_the_shared_loop_learns_exactly_as_the_flat_loop(tmp_path, task, name, offsets):
    import argparse

    from tfamily.train import checkpoint
    p = argparse.ArgumentParser()
    ua.add_args(p)
    args = p.parse_args(["--steps", "6", "--d-model", "16", "--heads", "2", "--depth", "2", "--lstm-layers", "1",
                         "--train-len", "5", "--test-len", "12", "--batch", "4", "--warmup", "3", "--lr", "0.01",
                         "--offsets", offsets, "--eval-sequences", "4", "--seed", "2", "--out", str(tmp_path)])
    row = ua.train_one(task, name, args, ua.sample(task, 4, 6, torch.Generator().manual_seed(9)), lambda m: None)
    assert row["steps"] == 6
    net = ua.make_model(name, args)
    checkpoint.load(tmp_path / "runs" / f"{task}-{name}").load_weights(net)
    want = _flat_train(task, name, args)
    got = net.state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lstm_greedy_matches_teacher_forced_argmax(seed):
    torch.manual_seed(seed)
    net = ua.make_model("lstm", Namespace(d_model=16, lstm_layers=2)).eval()
    batch = ua.collate(ua.sample("reverse", 5, 9, torch.Generator().manual_seed(seed)))
    out = greedy_decode(net, batch["src"], bos=ua.BOS, eos=ua.EOS, max_len=7, src_padding=batch["src_padding"])
    with torch.no_grad():
        logits = net(batch["src"], out[:, :-1], src_padding=batch["src_padding"])
    ref = logits.argmax(-1)
    for row in range(out.shape[0]):  # up to and including each row's first EOS
        stop = next((i for i, t in enumerate(out[row, 1:].tolist()) if t == ua.EOS), out.shape[1] - 2)
        assert torch.equal(out[row, 1:stop + 2], ref[row, :stop + 1])


def test_lstm_ignores_source_padding():
    torch.manual_seed(0)
    net = ua.make_model("lstm", Namespace(d_model=16, lstm_layers=1)).eval()
    short = ua.collate([([1, 2, 3], [3, 2, 1])])
    padded = ua.collate([([1, 2, 3], [3, 2, 1]), ([4, 5, 6, 7, 8, 9], [1])])
    with torch.no_grad():
        a = net(short["src"], short["tgt_in"], src_padding=short["src_padding"])
        b = net(padded["src"], padded["tgt_in"], src_padding=padded["src_padding"])
    assert torch.allclose(a[0], b[0, :a.shape[1]], atol=1e-6)


def test_command_runs_and_writes_its_files(tmp_path, capsys):
    assert REPROS["ut-algorithmic"] == "tfamily.repro.ut_algorithmic"
    rc = main(["repro", "ut-algorithmic", "--steps", "2", "--d-model", "16", "--heads", "2", "--depth", "2",
               "--lstm-layers", "1", "--train-len", "6", "--test-len", "10", "--batch", "4",
               "--eval-sequences", "6", "--out", str(tmp_path), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(rows) == len(ua.TASKS) * len(ua.MODELS)
    assert {(r["task"], r["model"]) for r in rows} == {(t, m) for t in ua.TASKS for m in ua.MODELS}
    for r in rows:
        assert r["steps"] == 2 and 0.0 <= r["char_acc"] <= 1.0 and 0.0 <= r["seq_acc"] <= 1.0
        assert (r["paper_char_acc"], r["paper_seq_acc"]) == ua.PAPER.get((r["model"], r["task"]), (None, None))
    for name in ("results.json", "results.csv", "ut_algorithmic.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert json.loads((tmp_path / "results.json").read_text()) == rows


def test_table_prints_beside_the_paper(tmp_path, capsys):
    assert main(["repro", "ut-algorithmic", "--tasks", "copy", "--models", "ut", "ut_act", "--steps", "1",
                 "--d-model", "8", "--heads", "2", "--depth", "1", "--train-len", "4", "--test-len", "6",
                 "--batch", "2", "--eval-sequences", "3", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "paper char" in lines[0] and "0.91" in lines[1] and "0.35" in lines[1] and lines[2].split()[-1] == "-"


def test_time_budget_stops_training(tmp_path, capsys):
    rc = main(["repro", "ut-algorithmic", "--tasks", "copy", "--models", "lstm", "--steps", "100000",
               "--time", "0.5", "--d-model", "8", "--heads", "2", "--lstm-layers", "1", "--train-len", "4",
               "--test-len", "6", "--batch", "2", "--eval-sequences", "3", "--out", str(tmp_path), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and 0 < rows[0]["steps"] < 100000


@pytest.mark.parametrize("argv,match", [
    (["--steps", "0"], "--steps"), (["--tasks", "sort"], "--tasks"), (["--models", "gru"], "--models"),
    (["--train-len", "50", "--test-len", "40"], "--test-len"), (["--d-model", "10", "--heads", "4"], "--heads"),
    (["--time", "-1"], "--time"), (["--device", "tpu"], "'tpu'")])
def test_bad_arguments_are_refused(tmp_path, capsys, argv, match):
    assert main(["repro", "ut-algorithmic", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and len(err.splitlines()) == 1
