"""Training hooks a part declares, collected the same way for every kind of model.

A part that adds to the loss (the adaptive-span L1 penalty, Sukhbaatar et al. 2019,
section 3; an ACT ponder cost, Graves 2016, eq. 14) implements ``AuxLoss``; a part that
must act after each optimiser step (clamping spans to [0, S]) implements ``AfterStep``; a
part whose loss follows a schedule (Al-Rfou et al. 2019's layer cut-offs) ``SeesProgress``.
Every model kind takes ``ForwardsHooks``, so its ``loss`` adds ``with_aux_losses`` and its
``after_step``/``set_progress`` reach every part: a part behaves the same whichever model holds it.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Protocol, runtime_checkable

from torch import Tensor, nn


class Model(Protocol):
    """What a model kind builds (``registry.MODELS``, assembled from a spec in ``build.py``): the
    ``objective`` it trains and the ``loss(batch) -> (loss, metrics)`` the loop calls (``ForwardsHooks``)."""

    objective: nn.Module

    def loss(self, batch: dict) -> tuple[Tensor, dict]: ...


@runtime_checkable
class AuxLoss(Protocol):
    def aux_loss(self) -> Tensor:
        """A scalar added to the training loss (already weighted by the part)."""


@runtime_checkable
class AfterStep(Protocol):
    def after_step(self) -> None:
        """Called once after every optimiser step (e.g. project parameters back into range)."""


@runtime_checkable
class SeesProgress(Protocol):
    def set_progress(self, progress: float) -> None:
        """Told before every training step the fraction of training done: steps taken over
        the loop's planned total (for a time budget, its current estimate of the last step)."""


@lru_cache(maxsize=None)
def _implements(cls: type, hook: str) -> bool:
    """Whether instances of ``cls`` have the hook method. A hook is a method of the part's
    class, so this is decided once per class: ``isinstance(mod, AuxLoss)`` on a runtime
    Protocol costs ~15 us a module, ~1 ms per scan of a 4-layer GPT and three scans a
    training step (about 2 ms, 6-10%, of the demo's step: ``experiments/training/ab_hot_path.py``)."""
    return callable(getattr(cls, hook, None))


def _hooked(model: nn.Module, hook: str):
    """(name, module) of every part below ``model`` whose class has ``hook``."""
    return [(name, mod) for name, mod in model.named_modules()
            if mod is not model and _implements(type(mod), hook)]


def aux_losses(model: nn.Module) -> dict[str, Tensor]:
    """Every part's auxiliary loss, keyed by its module name (the model itself excluded)."""
    return {name: mod.aux_loss() for name, mod in _hooked(model, "aux_loss")}


def with_aux_losses(model: nn.Module, loss: Tensor, metrics: dict) -> tuple[Tensor, dict]:
    """In training mode add every part's auxiliary loss to ``loss`` and report each as
    ``aux/<module name>``; in eval mode the objective's loss is returned alone, so
    validation numbers stay comparable across members."""
    if model.training:
        for name, aux in aux_losses(model).items():
            loss = loss + aux
            metrics[f"aux/{name}"] = aux.detach()  # a tensor: float() would sync a GPU every step
    return loss, metrics


def run_after_step(model: nn.Module) -> None:
    """Run every part's ``after_step()`` (the model itself excluded)."""
    for _, mod in _hooked(model, "after_step"):
        mod.after_step()


def run_set_progress(model: nn.Module, progress: float) -> None:
    """Tell every part that ``SeesProgress`` (e.g. the Al-Rfou losses' schedule) the progress."""
    for _, mod in _hooked(model, "set_progress"):
        mod.set_progress(progress)


class ForwardsHooks:
    """``loss``, ``aux_losses``, ``after_step`` and ``set_progress`` of a model whose parts declare
    the hooks above: the objective's loss plus every part's auxiliary loss, and the loop's calls
    passed on to every part. A model kind lists it beside ``nn.Module`` and holds an ``objective``
    (``objective(model, batch) -> (loss, metrics)``).

    A mixin, not a base model: it holds no state and no model logic, only the forwarding that is
    the same for every kind, so the kinds still share no implementation (one home for the block
    instead of a copy per kind). As methods of the model, the loop finds them by the ``AfterStep``
    and ``SeesProgress`` Protocols, as declared, never by probing attributes."""

    def loss(self, batch: dict) -> tuple[Tensor, dict]:
        """The objective's loss; in training mode plus every part's ``aux_loss()`` (an adaptive
        span's L1 penalty, an ACT ponder cost), reported in the metrics as ``aux/<name>``."""
        return with_aux_losses(self, *self.objective(self, batch))

    def aux_losses(self) -> dict[str, Tensor]:
        return aux_losses(self)

    def after_step(self) -> None:
        """Call once after every optimiser step (e.g. clamps adaptive spans to [0, S])."""
        run_after_step(self)

    def set_progress(self, progress: float) -> None:
        """Called by the loop before every step with the fraction of training done."""
        run_set_progress(self, progress)
