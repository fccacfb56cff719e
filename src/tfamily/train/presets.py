"""Size presets: the one place that says how big a run is when the user does not.

``size: paper`` trains each member at its paper's sizes with the run defaults of ``config.py``
(batch 32 x 256 tokens): a GPT-2-small step is about 4 TFLOP, tens of seconds on a 2-core CPU.
``size: small`` keeps every member's choices (pattern, kernel, positions, residual, depth, state,
objective) and shrinks what the paper scaled for its hardware: width, depth, heads, memory and
span, and the batch (16 x 128 tokens), so that a default run of 1000 steps of any member ends
within 10 minutes on 2 CPU cores (docs/results/training.md lists the measured times).
``size: auto`` (what `tfamily train` starts from) is small on a CPU and paper on CUDA.

A value set anywhere else wins over the preset, key by key: a config file, a ``key=value``
override, a flag. The model part is applied to the member itself (``member_dict``), below the
config's ``model`` overrides, so a sparse member's context rule (``members.Member.at_context``)
starts from the small member's sizes just as from the paper's.
"""
from __future__ import annotations

from ..base.dicts import deep_merge


SIZES = ("small", "paper")

# The Transformer members at size small: d 128, 4 heads, 4 layers (or 4 applications of a shared
# block), feed-forward 4 d; d_ff and d_head follow d_model (null), so a model.d_model override
# keeps the paper's ratios.
_TRANSFORMER = {"d_model": 128, "heads": {"n_heads": 4, "d_head": None}, "depth": {"n_layers": 4},
                "ff": {"d_ff": None}}

# The sparse members' learned position tables are as long as their papers' contexts (4096 to 23040
# rows, up to 3M parameters at d 128); at size small, 1024 rows like GPT-2's.
_SPARSE = {**_TRANSFORMER, "position": {"max_len": 1024}}

# member -> its spec overrides at size small (members not named take _TRANSFORMER).
_SMALL_MEMBERS = {
    **dict.fromkeys(("sparse_transformer_strided", "sparse_transformer_fixed", "bigbird", "image_transformer_1d",
                     "image_transformer_2d"), _SPARSE),
    # windows growing with depth as in the paper (32 in the first layer to 512 in the twelfth), doubling
    "longformer": {**_SPARSE, "pattern": {"per_layer": [
        {"name": "longformer", "params": {"window": w, "n_global": 1}} for w in (32, 64, 128, 256)]}},
    # grouped-query as in Llama 3 (4 query heads per key/value head): 4 heads share 1
    "llama": {**_TRANSFORMER, "heads": {"n_heads": 4, "n_kv_heads": 1, "d_head": None}},
    # memory as long as the segment, as in the paper (512 and 512)
    "transformer_xl": {**_TRANSFORMER, "state": {"mem_len": 128}},
    "gtrxl": {**_TRANSFORMER, "state": {"mem_len": 128}},
    "trxl_i": {**_TRANSFORMER, "state": {"mem_len": 128}},
    # the largest span (and the memory holding it) twice the segment; the paper's is 16 times
    "adaptive_span": {**_TRANSFORMER, "pattern": {"params": {"max_span": 256}}, "state": {"mem_len": 256}},
    # recurrent members: the Elman RNN is small already; the others at 256 units, at most 2 layers
    "rnn_lm": {},
    "lstm_lm": {"d_model": 256},
    "gru_lm": {"d_model": 256},
    "lstm_seq2seq": {"d_model": 256, "depth": {"n_layers": 2}},
    "luong_attention": {"d_model": 256, "depth": {"n_layers": 2}},
    "bahdanau_attention": {"d_model": 256},
}

# size -> the run's data and train defaults (under what the config sets)
_RUN = {"small": {"data": {"seq_len": 128}, "train": {"batch_size": 16}}, "paper": {}}


def check_size(size) -> None:
    if size not in (*SIZES, "auto"):
        raise ValueError(f"size={size!r} is not valid; use --size small, --size paper, or auto (small on a CPU, "
                         f"paper on CUDA)")


def model_overrides(member: str, size: str) -> dict:
    """The spec overrides that make ``member`` the given ``size`` (none at paper size)."""
    check_size(size)
    return _SMALL_MEMBERS.get(member, _TRANSFORMER) if size == "small" else {}


def member_dict(member: str, size: str, preset: dict) -> dict:
    """The member's spec dict ``preset`` at ``size``."""
    return deep_merge(preset, model_overrides(member, size))


def resolve(d: dict) -> dict:
    """The config dict ``d`` with its ``size`` decided (auto: small on a CPU, paper on CUDA) and that
    size's data and train defaults under what ``d`` sets."""
    size = d.get("size", "paper")
    check_size(size)
    if size == "auto":
        train = d.get("train")
        size = "paper" if _cuda(train.get("device", "auto") if isinstance(train, dict) else "auto") else "small"
    return {**deep_merge(_RUN[size], d), "size": size}


def _cuda(device) -> bool:
    if str(device).startswith("cuda"):
        return True
    if device != "auto":
        return False
    import torch
    return torch.cuda.is_available()
