"""Text as a Task: a contiguous stream carries the model's state and resets it when the
stream wraps around; random windows carry nothing."""
from __future__ import annotations

import math

from tfamily.settings.run import DataConfig
from tfamily.train.task import Task
from tfamily.train.tasks import make_task
from tfamily.train.tasks.text import TextTask


class _Recorder:
    def __init__(self):
        self.resets = []

    def reset(self, rows=None):
        self.resets.append(rows)


def test_a_stream_resets_the_carried_state_when_it_wraps():
    task = make_task(DataConfig(corpus="tinyshakespeare", seq_len=4096, stream=True), 64, seed=0)
    assert isinstance(task, TextTask) and isinstance(task, Task) and task.carries_state
    n = task.train.n_batches
    state = _Recorder()
    for _ in range(n):
        task.next()
        task.carry(state)
    assert state.resets == [] and task.epoch == 0
    b = task.next()
    task.carry(state)
    assert state.resets == [None] and task.epoch == 1  # every row starts anew
    assert task.size(b) == b["x"].numel()
    # Resuming at this position does not reset again: the saved state already saw the wrap.
    again = make_task(DataConfig(corpus="tinyshakespeare", seq_len=4096, stream=True), 64, seed=0)
    again.load_state_dict(task.state_dict())
    again.next()
    again.carry(state)
    assert state.resets == [None]


def test_windows_carry_nothing_and_report_bits_per_character():
    task = make_task(DataConfig(corpus="tinyshakespeare", seq_len=32), 4, seed=0)
    assert not task.carries_state and task.unit == "tokens"
    assert task.eval_metrics(math.log(2)) == {"bpc": 1.0}
