"""The Task protocol: everything the training loop needs from a kind of work.

The loop (``train/loop.py``) never looks inside a batch: it asks the task for the
next batch of this rank's rows, hands it to ``model.loss``, and asks the task how
much work the batch was (``size``, in the task's ``unit``: tokens of text, pixels of
an image, environment steps of a rollout), so throughput and budgets are counted in
what the task is about. A task also says whether the model's state is carried from
one batch to the next and updates it before each batch (``carry``: reset the rows
whose stream, document or episode starts anew), gives held-out batches and the
metrics its field reports (bits per character, bits per dimension), and saves and
restores its position so a resumed run sees exactly the batches it would have.

Tasks today (``train/tasks/``, where ``make_task`` picks one from a ``data`` config): text (random windows or contiguous streams), the
synthetic tasks, sequence-to-sequence pairs for the encoder-decoder, and pixel
images. Reinforcement-learning rollouts are one more class with the same methods:
``next`` runs the policy in the environments, ``size`` counts environment steps,
``carry`` resets the rows whose episode ended.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable


@runtime_checkable
class Task(Protocol):
    name: str
    kind: str                 # "text", "lm", "classification", "seq2seq", "pixels", ...
    unit: str                 # what ``size`` counts: "tokens", "pixels", "steps"
    vocab: object | None      # a text vocabulary (saved with checkpoints), else None
    vocab_size: int           # ids the model must embed
    seq_len: int              # the longest input the model sees (position tables are sized to it)
    carries_state: bool       # the model's state crosses batches (contiguous streams)

    def next(self) -> dict:
        """The next training batch (this rank's rows) as the dict ``model.loss`` takes."""

    def size(self, batch: dict) -> int:
        """How much work ``batch`` is, in ``unit``s (for throughput and time budgets)."""

    def carry(self, state) -> None:
        """After ``next`` and before the model sees that batch: update the carried ``state``
        (``reset`` the rows that start anew). Called only when ``carries_state``."""

    def eval_batches(self, max_units: int | None, batch_size: int) -> Iterator[dict]:
        """This rank's share of one deterministic held-out pass."""

    def eval_size(self, max_units: int | None) -> int:
        """About how many units an evaluation scores (to budget its time)."""

    def eval_metrics(self, loss: float) -> dict:
        """Metrics of the field derived from the mean loss (e.g. ``{"bpc": ...}``)."""

    def state_dict(self) -> dict:
        """The task's position: plain JSON values, and tensors where the position is data
        (an RL rollout's buffer and its environments' actions), which checkpoints keep in
        safetensors (``snapshot.py``)."""

    def load_state_dict(self, state: dict) -> None: ...


@runtime_checkable
class Reports(Protocol):
    """A task with numbers of its own for the progress bar, ``train.csv``, TensorBoard and
    ``result.json`` (an RL rollout: the mean episode return), named up front so the CSV
    has their columns."""

    report_fields: tuple[str, ...]

    def report(self) -> dict:
        """The current values of ``report_fields`` (numbers, or None before the first)."""


def step_position(kind: str, task, state: dict | None = None) -> dict:
    """A task whose position is (seed, step) over independent batches: its ``state_dict`` (no
    ``state``), or, given a saved ``state``, the check that it fits this run (same kind, task and
    global batch) before ``task.seed`` and ``task.step`` take its values."""
    want = {"type": kind, "task": task.name, "global_batch": task.batch_size * task.world_size}
    if state is None:
        return {**want, "seed": task.seed, "step": task.step}
    diffs = [f"{k}: saved {state.get(k)!r}, here {v!r}" for k, v in want.items() if state.get(k) != v]
    if diffs:
        raise ValueError(f"the checkpoint's data position does not fit this run ({'; '.join(diffs)})")
    task.seed, task.step = int(state["seed"]), int(state["step"])
    return state
