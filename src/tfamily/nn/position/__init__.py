"""Position encodings, registered in ``POSITIONS`` (``tfamily.registry``).

``stage="input"`` parts are added to the embeddings once (``InputPosition``);
``stage="attention"`` parts are built per attention layer and change its queries,
keys and scores (``AttentionPosition``, e.g. relative or rotary). ``needs`` are the
sizes the builder supplies; any other constructor keyword is a ``position.params`` key.
"""
from ...registry import POSITIONS
from .absolute import InputPosition, Learned, NoPosition, Sinusoidal, sinusoid_table
from .buckets import BucketedRelative
from .relative import RelativePosition
from .rotary import Rotary

POSITIONS.register("sinusoidal", Sinusoidal, needs=("d_model",), stage="input")
POSITIONS.register("learned", Learned, needs=("max_len", "d_model"), stage="input")
POSITIONS.register("none", NoPosition, stage="input")
# Dai et al. 2019 (Transformer-XL); params clamp_len, same_length
POSITIONS.register("relative", RelativePosition, needs=("d_model", "n_heads", "d_head"), stage="attention")
# Su et al. 2021 (RoFormer); param base
POSITIONS.register("rotary", Rotary, needs=("d_head",), stage="attention")
# Raffel et al. 2020 (T5); params num_buckets, max_distance. shared: one table per stack, every layer reads it.
POSITIONS.register("t5_relative", BucketedRelative, needs=("n_heads", "causal"), stage="attention", shared=True)

__all__ = ["InputPosition", "Learned", "NoPosition", "Sinusoidal", "sinusoid_table",
           "RelativePosition", "Rotary", "BucketedRelative", "POSITIONS"]
