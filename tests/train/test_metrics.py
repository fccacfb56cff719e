"""The run's logs: the evaluation message names what a task measured and leaves out what it did not."""
from __future__ import annotations

from tfamily.train.metrics import Logger


def test_eval_message_skips_a_missing_accuracy_and_shows_the_task_values(tmp_path, capsys):
    log = Logger(tmp_path, tensorboard=False, progress=False, total=10)
    log.log_eval({"step": 5, "tokens": 80, "loss": 0.25, "bpc": None, "ppl": 1.3, "acc": float("nan")},
                 extra={"return": 0.875})
    log.log_eval({"step": 10, "tokens": 160, "loss": 0.5, "bpc": 0.72, "ppl": 1.6, "acc": 0.5})
    err = capsys.readouterr().err
    assert "step 5: val loss 0.2500, return 0.875\n" in err
    assert "step 10: val loss 0.5000, bpc 0.7200, acc 0.5000\n" in err
    rows = (tmp_path / "eval.csv").read_text().splitlines()
    assert rows[0] == "step,tokens,loss,bpc,ppl,acc" and len(rows) == 3
