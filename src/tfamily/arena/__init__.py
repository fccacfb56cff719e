"""The arena: family members side by side on the same long-range tasks, at the same budget, in one
leaderboard (after Long Range Arena, Tay et al. 2021).

`tfamily arena --members gpt longformer --tasks listops --steps 200 --out DIR` trains every
(task, member, seed) cell through the shared loop (``train.Trainer`` driving a
``train.tasks.classify.ClassifyTask``), each in its own run directory, resumable and shardable
(``grid.py``), and writes the leaderboard (``table.py``); `tfamily arena report DIR` renders it,
its plots and every cell's learning curve as one HTML page (``report.py``). The tasks are in
``tasks.py``.

The rules every cell follows (enforced by ``grid.config``, the only place a cell's settings are made):

* every member runs as its bidirectional encoder, LRA's setting: the member's own pattern at the
  task's length (its context rule first) without the causal restriction (``variants.two_sided``:
  causal -> full, ``causal=False`` for every sparse part, a sliding window halved to each side),
  with the padding mask, pooled by the mean over real tokens (``models/classifier.py``).
  ``NAME:causal`` (or ``--causal`` for every member) runs the decoder as it is instead, read at its
  last real token. A member with no two-sided pattern, or one the classifier cannot build (XL
  memory, an RNN state), is refused before any training;
* a task of pairs (``match``) is read by a ``dual_encoder`` (``models/dual_encoder.py``): one
  encoder per input, shared, then ``[u, v, u * v, u - v]`` into an MLP;
* the same width, depth and heads (``--d-model``, ``--layers``, ``--heads``), the rest of the member
  at its small size (the sparse members' sizes scaled to the task's length by their own rule); d_ff
  is set per member and task so its parameter count is as close as d_ff allows to the first
  member's at d_ff = 4 d_model (within 10% for every member with a feed-forward;
  ``--no-match-params`` keeps each member's own), and the count and d_ff are reported beside
  the accuracy;
* the same data in the same order for a seed, the same held-out sets for every seed; the same
  optimiser (AdamW), warm-up and cosine schedule, learning rate, batch, steps or time budget,
  precision (fp32 by default) and thread count. Several ``--lr`` values make a sweep: every member
  runs every seed at each, and the leaderboard reports the rate with the best mean validation
  accuracy (the sweep's cost, ``sweep_s``, beside it);
* accuracy is on the test set, after training; speed (training tokens per second, padding
  included) and peak memory come from the cell's own process, so compare them only between cells
  run one after another on one machine, never between shards run in parallel.
"""

# The members the arena compares by default (`tfamily arena` with no --members); here rather than in
# grid.py so that `tfamily arena --help` imports no torch.
ARENA_MEMBERS = ("gpt", "sparse_transformer_strided", "longformer", "bigbird", "reformer")
