"""scripts/merge_long_runs.py: the per-process results of long_runs_gpu.sh become one table and plots."""
import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location("merge_long_runs", Path(__file__).parents[2] / "scripts" / "merge_long_runs.py")
merge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(merge)


def _ua(task, model, char, steps=100):
    return [{"task": task, "model": model, "steps": steps, "train_seconds": 10.0, "params": 5, "final_loss": 1.0,
             "char_acc": char, "seq_acc": char / 2, "paper_char_acc": 0.5, "paper_seq_acc": None}]


def _rd(model, loss):
    return [{"model": model, "steps": 7, "train_s": 3.0, "params": 9, "val_loss": loss, "greedy_exact": 0.1,
             "greedy_char": 0.2, "beam_exact": 0.1, "beam_char": 0.2}]


def test_later_runs_win_and_the_plots_are_written(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "utalg_copy_ut.out").write_text(json.dumps(_ua("copy", "ut", 0.25)))
    (a / "utalg_copy_lstm.out").write_text(json.dumps(_ua("copy", "lstm", 0.125)))
    (b / "utalg_copy_ut.out").write_text(json.dumps(_ua("copy", "ut", 0.75, steps=200)))  # the rerun
    (a / "revdict_lstm.out").write_text(json.dumps(_rd("lstm", 1.5)))
    (b / "revdict_ut.out").write_text("")  # a failed run: skipped, its .log says why
    merge.main(tmp_path / "dest", [a, b])
    rows = json.loads((tmp_path / "dest" / "summary.json").read_text())["rows"]
    assert set(rows) == {"utalg_copy_ut", "utalg_copy_lstm", "revdict_lstm"}
    assert (rows["utalg_copy_ut"]["char_acc"], rows["utalg_copy_ut"]["source"]) == (0.75, "b")
    md = (tmp_path / "dest" / "summary.md").read_text()
    assert "| utalg_copy_ut (b) | 200 | 10 | char 0.750 seq 0.375" in md
    for png in ("ut_algorithmic.png", "reverse_dictionary.png"):
        assert (tmp_path / "dest" / png).read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "dest" / "al_rfou_curves.png").exists()  # no al-rfou rows, no curves
