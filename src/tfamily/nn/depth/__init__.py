"""The depth axis: how layers repeat (``Depth``).

``Stack`` (N distinct layers, optionally checkpointed), ``ReversibleStack`` (RevNet
couplings, Gomez et al. 2017, as the Reformer uses them), ``Universal`` and ``UniversalACT``
(one shared layer repeated, with t2t's halting; Dehghani et al. 2019), ``RecurrentStack`` (a
whole torch RNN/LSTM/GRU) and Graves' ``ACT`` cell (2016). Each registers in ``DEPTHS`` beside its
class, taking plain arguments: ``blocks(i)`` builds layer i (the builder supplies it), ``n_layers``,
``final_norm``, and what the kind reads (``checkpointing``, ``d_model``, ``dropout``); the recurrent
stacks also register their hidden state in ``STATES``.
"""
from .act import ACT, ACTOutput
from .base import Depth
from .recurrent import (CELLS, RNN_OPTIONS, Hidden, RecurrentStack, RNNState, check_right_padding, make_rnn,
                        select_rows, top)
from .reversible import ReversibleStack
from .stack import Stack
from .universal import HaltingUnit, Universal, UniversalACT, check_act

__all__ = ["Depth", "Stack", "ReversibleStack", "Universal", "UniversalACT", "HaltingUnit", "check_act",
           "RecurrentStack", "RNNState", "Hidden", "CELLS", "RNN_OPTIONS", "make_rnn", "top", "select_rows",
           "check_right_padding", "ACT", "ACTOutput"]
