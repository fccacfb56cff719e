"""The arena: family members side by side on the same long-range tasks, at the same budget, in one
leaderboard (after Long Range Arena, Tay et al. 2021).

`tfamily arena --members gpt longformer --tasks listops --steps 200 --out DIR` trains every
(task, member, seed) cell through the shared loop (``train.Trainer`` driving a
``train.tasks.classify.ClassifyTask``), each in its own run directory, resumable and shardable
(``grid.py``), and writes the leaderboard (``table.py``); `tfamily arena report DIR` renders it,
its plots and every cell's learning curve as one HTML page (``report.py``); `tfamily arena speed DIR`
measures the speed and memory columns (``speed.py``). The tasks are declared one per file in ``tasks/``
(``tasks/lm.py``: byte-level language modelling).

The rules every cell follows (enforced by ``grid.config``, the only place a cell's settings are made):

* every member is one base, gpt's recipe (GPT-2's init, embeddings, GELU and dropout sites), with
  only its own attention (``members.Member.attention_only``: pattern, kernel, shared-QK heads, and the
  Reformer's reversible depth), LRA's protocol, so a table ranks attention mechanisms and not
  recipes; the dense baseline is that base (``gpt``). ``--as-papers`` trains each member's full preset
  instead, and its tables say so; a member whose base is not the decoder's is refused without it;
* every member runs as its bidirectional encoder, LRA's setting: the member's own pattern at the
  task's length (its context rule first) without the causal restriction (``variants.two_sided``:
  causal -> full, ``causal=False`` for every sparse part, a sliding window halved to each side),
  with the padding mask, pooled by the mean over real tokens (``models/classifier.py``).
  ``NAME:causal`` (or ``--causal`` for every member) runs the decoder as it is instead, read at its
  last real token. A member with no two-sided pattern, or one the classifier cannot build (XL
  memory, an RNN state), is refused before any training;
* a task of pairs (``match``) is read by a ``dual_encoder`` (``models/dual_encoder.py``): one
  encoder per input, shared, then ``[u, v, u * v, u - v]`` into an MLP;
* the language-modelling task (``lm``) is the one exception to the encoder rule: every member runs
  as its causal decoder (its own pattern at the task's length), since a language model predicts
  each byte from the ones before it; it is scored in bits per byte of held-out test windows, lower
  is better, and a sweep picks the rate with the lowest validation bpc;
* the same width, depth and heads (``--d-model``, ``--layers``, ``--heads``), the rest of the member
  at its small size (the sparse members' sizes scaled to the task's length by their own rule); d_ff
  is set per member and task so its parameter count is as close as d_ff allows to the first
  member's at d_ff = 4 d_model (within 10% for every member with a feed-forward;
  ``--no-match-params`` keeps each member's own), and the count and d_ff are reported beside
  the accuracy; a member d_ff cannot bring within 10% is refused before any training unless
  ``--allow-param-mismatch``, and then marked ``†`` in every table;
* the same data in the same order for a seed, the same held-out sets for every seed; the same
  optimiser (AdamW), warm-up and cosine schedule, learning rate, batch, steps (per task with
  ``--steps TASK=N``), time or FLOPs budget, precision (fp32 by default) and thread count. Several
  ``--lr`` values make a sweep: every member runs every seed at each (a FLOPs or time budget split
  evenly among the rates, so a member's seed spends the budget once), and the leaderboard reports
  the rate with the best mean validation score (the sweep's cost, ``sweep_s`` and ``sweep_flops``,
  beside it);
* cells merge into one table only when they may (``table.check_alike``): the seeds of one
  (task, member, rate) planned alike but for the seed, and a task's members at one length,
  width, depth, heads, batch, budget, precision and base;
* a FLOPs budget (``--flops``) is counted by one rule for every member (``flops.py``): a step is
  3 forward passes; outside attention every matrix product that runs (a weight-shared or ACT depth
  pays per step); attention 4 d_head FLOPs per (query, key) pair per head, crediting a pattern only
  the pairs it allows, and LSH its sorted chunk windows (2 c keys a query a round) plus hashing
  (the rotation and the sort); recomputation (reversible layers) is not credited. Each cell stops
  when its next step would pass the budget, and every cell reports its training FLOPs;
* accuracy (or bpc) is on the test set, after training. Speed (training tokens per second,
  padding included) and peak memory on the leaderboard are measured alternating in one process
  (``speed.py``): every member of a task built at its cells' shape, timed in turns over several
  rounds (median) and labelled with the machine, after a complete unsharded grid or by `tfamily
  arena speed DIR`; never from parallel jobs or shards. Until then the columns are the cells'
  own (``speed_from`` says which).
"""

# The members the arena compares by default (`tfamily arena` with no --members); here rather than in
# grid.py so that `tfamily arena --help` imports no torch.
ARENA_MEMBERS = ("gpt", "sparse_transformer_strided", "longformer", "bigbird", "reformer")
