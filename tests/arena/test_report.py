"""`tfamily arena report DIR`: one self-contained HTML page of a tiny arena; the arena-cpu preset."""
from __future__ import annotations

import base64
import re

from tfamily import cli


def test_report_is_one_page_with_the_table_and_every_figure_inlined(tmp_path, capsys):
    out = tmp_path / "arena"
    argv = ["arena", "--members", "gpt", "longformer", "--tasks", "listops", "pathfinder", "--length", "listops=16",
            "pathfinder=8", "--steps", "2", "--d-model", "16", "--layers", "1", "--heads", "2", "--batch-size", "4",
            "--eval-examples", "8", "--speed-rounds", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    assert cli.main(["arena", "report", str(out)]) == 0
    page = (out / "report.html").read_text()
    for heading in ("Leaderboard", "Accuracy against speed", "Per task", "Learning curves", "Cells"):
        assert f"<h2>{heading}" in page
    assert page.count("<h3>listops (length 16") == 1 and page.count("<td>longformer</td>") == 2 + 2  # rows, cells
    assert "<th>test accuracy %</th>" in page and "<td>majority class</td>" in page
    assert "<th>test_bpc</th>" not in page and "bits per byte" not in page  # classification only: no bpc columns
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 1 + 2 + 1  # the scatter, a bar chart per task, the learning curves
    assert all(base64.b64decode(b)[:4] == b"\x89PNG" for b in images)
    assert "http" not in page  # nothing to fetch: the page opens offline
    assert cli.main(["arena", "report", str(out), "--out", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text() == page


def test_report_of_a_directory_without_cells_is_refused_in_one_line(tmp_path, capsys):
    assert cli.main(["arena", "report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no finished arena cells" in err


def test_the_arena_cpu_preset_fills_the_flags_not_given():
    from tfamily.arena.cli import apply_preset
    parser = cli.make_parser()
    args = parser.parse(["arena", "--preset", "arena-cpu"])
    apply_preset(args)
    assert (args.tasks, args.seeds, args.steps, args.lr, args.batch_size, args.threads) == (
        ["listops", "mnist", "text"], 3, ["600", "text=80"], [1e-3, 2e-3], 16, 1)
    assert args.length == ["listops=128", "mnist=14", "text=1024"] and len(args.members) == 5
    args = parser.parse(["arena", "--preset", "arena-cpu", "--tasks", "listops", "--seeds", "1", "--time", "5m",
                              "--length", "listops=256"])
    apply_preset(args)
    assert (args.tasks, args.seeds, args.steps, args.time) == (["listops"], 1, None, "5m")
    assert args.length == ["mnist=14", "text=1024", "listops=256"]
    args = parser.parse(["arena", "--preset", "arena-cpu", "--steps", "100", "mnist=50", "--lr", "3e-3"])
    apply_preset(args)  # a plain --steps replaces the preset's, a task's wins over the preset's for that task
    assert (args.steps, args.lr) == (["text=80", "100", "mnist=50"], [3e-3])
