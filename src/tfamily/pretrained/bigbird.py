"""BigBird (Zaheer et al. 2020) masked LMs from Hugging Face's ``BigBirdForMaskedLM``.

A BERT (``bert.py``: embeddings with positions from 0, post-norm layers, the MLM head, loaded
the same way) whose self-attention is ``attention_type``:
- ``"block_sparse"``: the ITC layout as the peer computes it in eval mode (``bigbird_itc``,
  ``nn/patterns/bigbird_itc.py``): first and last block global, a window of three blocks, and
  the random blocks as the peer's inference draws them, all block 0 (so block 0 weighs
  ``1 + num_random_blocks`` in a non-global query's softmax), with the peer's fall-back to full
  attention on inputs of at most ``(5 + 2 * num_random_blocks) * block_size`` tokens. That is
  what a pretrained checkpoint computes when it is used, so the logits are the peer's; the
  peer's training-mode random blocks (numpy draws seeded per layer) are not reproduced: train
  further with the pattern overridden to ``bigbird`` (random blocks hashed per layer and head);
- ``"original_full"``: full attention.
The attention runs on the block-sparse kernel in tiles of ``block_size``, so its cost follows
the layout's density.
"""
from __future__ import annotations

from torch import Tensor

from ..spec import Spec
from . import bert
from .load import PretrainedError, Weights, field, refuse_set

PREFIXES = ("bert.",)
IGNORE = bert.IGNORE


def spec(config: dict) -> Spec:
    refuse_set(config, "is_decoder", (False, None), " (only BigBirdForMaskedLM is imported)")
    refuse_set(config, "rescale_embeddings", (False, None), " (embeddings times sqrt(d_model) are not mapped)")
    refuse_set(config, "use_bias", (True, None), " (BERT's layers have biases)")
    kind = field(config, "attention_type", "block_sparse",
                 choices={"block_sparse": "block_sparse", "original_full": "original_full"})
    base = bert.spec({**config, "model_type": "bert"})
    block = field(config, "block_size", 64)
    pattern = {"name": "full"} if kind == "original_full" else {"name": "bigbird_itc", "params": {
        "block": block, "n_random": field(config, "num_random_blocks", 3)}}
    try:
        return base.override({"member": "bigbird", "paper": "Zaheer et al. 2020 (BigBird), from a Hugging Face "
                              "checkpoint", "pattern": pattern, "kernel": {"name": "blocksparse", "params": {"block_size": block}}})
    except (TypeError, ValueError) as e:
        raise PretrainedError(f"config.json fields block_size/num_random_blocks have no tfamily mapping ({e})") from e


def weights(config: dict, spec_: Spec, w: Weights) -> dict[str, Tensor]:
    return bert.weights({**config, "model_type": "bert"}, spec_, w)
