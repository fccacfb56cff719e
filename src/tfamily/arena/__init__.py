"""The arena: family members side by side on the same long-range tasks, at the same budget, in one
leaderboard (after Long Range Arena, Tay et al. 2021).

`tfamily arena --members gpt longformer --tasks listops --steps 200 --out DIR` trains every
(task, member, seed) cell through the shared loop (``train.Trainer`` driving a
``train.tasks.classify.ClassifyTask``), each in its own run directory, resumable and shardable
(``grid.py``), and writes the leaderboard (``table.py``). The tasks are in ``tasks.py``.

The rules every cell follows (enforced by ``grid.config``, the only place a cell's settings are made):

* every member is a ``classifier`` (``models/classifier.py``): its own pattern, read at the last
  real token; a member the rule cannot build (one carrying XL memory or an RNN state) is refused
  before any training;
* the same width, depth and heads (``--d-model``, ``--layers``, ``--heads``), the rest of the member
  at its small size (d_ff = 4 d_model; the sparse members' sizes scaled to the task's length by their
  own rule), so parameter counts differ only by what the member is (Reformer's shared QK) and
  are reported beside the accuracy;
* the same data in the same order for a seed, the same held-out sets for every seed; the same
  optimiser (AdamW), warm-up and cosine schedule, learning rate, batch, steps or time budget,
  precision (fp32 by default) and thread count;
* accuracy is on the test set, after training; speed (training tokens per second, padding
  included) and peak memory come from the cell's own process, so compare them only between cells
  run one after another on one machine, never between shards run in parallel.
"""
