"""The Hugging Face families tfamily reads and writes: what a family module defines (``Family``,
and ``Exports`` for one that also writes checkpoints), and the registry that finds one
(``registry.PRETRAINED``: config.json's ``model_type`` -> the module's ``spec``; the module in the
entry's ``info["family"]``).

A family is one module of this folder with the names of ``Family`` (or ``Exports``), registered by
one line at the end of this file: the import (``api.family``) finds it by the checkpoint's
``model_type``, the export (``hf.family_of``) by asking each exporting family whether it ``exports``
a spec; no other table names it.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Generic, Protocol, runtime_checkable

from .. import registry

if TYPE_CHECKING:
    from torch import Tensor

    from ..spec import Spec
    from .load import Weights


@runtime_checkable
class Family(Protocol):
    """The names a family module defines to be imported (``api.from_pretrained``)."""

    PREFIXES: tuple[str, ...]  # weight-name prefixes a checkpoint may carry (``transformer.``), dropped on load
    IGNORE: tuple[str, ...]    # weight names (or parts of them) that hold nothing tfamily builds

    def spec(self, config: dict) -> Spec:
        """The spec of a checkpoint's config.json; a field without a mapping is a ``PretrainedError``."""

    def weights(self, config: dict, spec: Spec, w: Weights) -> dict[str, Tensor]:
        """The built model's state from the checkpoint's tensors, each taken from ``w`` once."""


@runtime_checkable
class Exports(Family, Protocol):
    """The names a family module defines to be written back (``tfamily export --format hf``)."""

    TITLE: str  # the peer as a refusal names it ("GPT-2", "Llama, Mistral")
    MODEL: str  # the tfamily model kind it maps to ("decoder", "encoder", "encoder_decoder")

    def exports(self, spec: Spec) -> bool:
        """Whether this family is the peer of ``spec`` (exactly one exporting family says so)."""

    def config(self, resolved: dict) -> dict:
        """config.json for a resolved spec dict (``hf.resolved``), which ``spec`` maps back."""

    def hf_weights(self, spec: Spec, state: dict[str, Tensor]) -> dict[str, Tensor]:
        """The checkpoint's tensor names (without a prefix) from a built model's state."""


def register(module: ModuleType, *model_types: str, exports: bool = False) -> ModuleType:
    """Make ``module`` the family of each of ``model_types`` (config.json's ``model_type``); ``exports``:
    it also writes checkpoints. A module lacking a name of its Protocol is refused, naming them."""
    protocol = Exports if exports else Family
    missing = [n for n in _names(protocol) if not hasattr(module, n)]
    if missing or not model_types:
        raise TypeError(f"{module.__name__} cannot be a pretrained family: it lacks {missing or 'a model_type'} "
                        f"(the names of tfamily.pretrained.families.{protocol.__name__})")
    for kind in model_types:
        registry.PRETRAINED.register(kind, module.spec, family=module, exports=exports)
    return module


def _names(protocol: type) -> list[str]:
    """The names a Protocol declares (its own and its bases'): annotated constants and methods."""
    mine = [c for c in reversed(protocol.__mro__) if c not in (Protocol, Generic, object)]
    return list(dict.fromkeys(n for c in mine for n in (*vars(c).get("__annotations__", {}), *vars(c))
                              if not n.startswith("_")))


def family(model_type: str) -> Family:
    """The family module of ``model_type`` (KeyError when there is none)."""
    if model_type not in registry.PRETRAINED:
        raise KeyError(model_type)
    return registry.PRETRAINED.entry(model_type).info["family"]


def table() -> Mapping[str, str]:
    """model_type -> the family module's short name, in registration order (``api.FAMILIES``)."""
    return {kind: family(kind).__name__.rsplit(".", 1)[-1] for kind in registry.PRETRAINED.in_order()}


def exporting() -> list[Exports]:
    """The families that write checkpoints, once each, in registration order."""
    entries = [registry.PRETRAINED.entry(kind).info for kind in registry.PRETRAINED.in_order()]
    return list(dict.fromkeys(info["family"] for info in entries if info["exports"]))


# One line per family, in the order a refusal lists them ("supported: gpt2, llama, ...").
register(importlib.import_module(f"{__package__}.gpt2"), "gpt2", exports=True)
register(importlib.import_module(f"{__package__}.llama"), "llama", "mistral", exports=True)
register(importlib.import_module(f"{__package__}.bert"), "bert", "roberta", exports=True)
register(importlib.import_module(f"{__package__}.t5"), "t5", exports=True)
register(importlib.import_module(f"{__package__}.longformer"), "longformer", exports=True)
register(importlib.import_module(f"{__package__}.bigbird"), "big_bird")
