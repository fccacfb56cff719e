"""Ctrl-C that always ends the process within seconds, and never inside a checkpoint write.

The default SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread happens to be:
inside a ``with lock:`` of a logger or the TensorBoard writer, a later ``close()`` in a
``finally`` can then wait forever for the lock the interrupted frame still holds. Two guards:

- ``guard()`` (around every CLI command): the first SIGINT still raises ``KeyboardInterrupt``,
  and also starts a timer that ends the process with status 130 if clean-up has not finished
  after ``GRACE_S`` seconds; a second SIGINT ends it at once.
- ``deferred()`` (around a checkpoint write): a SIGINT there is held until the write has
  finished or failed, so it never lands between a file and its fsync; the timer still runs, so
  a write slower than the grace period is abandoned half-written (a ``.tmp-*`` directory that
  no reader loads) and the last good checkpoint stays the newest complete one.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable

GRACE_S = 5.0
_state = {"deferring": False, "pending": False, "timer": None, "hint": None}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, carrying what to type to continue it (the CLI prints it)."""


@contextlib.contextmanager
def hinted(hint: Callable[[], str]):
    """Turn a Ctrl-C inside the block into ``Interrupted(hint())``: what to type to continue (the
    trainer's ``train/checkpoint.resumable`` names the newest checkpoint); a second Ctrl-C's exit
    prints it too. ``hint`` is called only then."""
    _state["hint"] = hint
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt as e:
        try:
            text = hint()
        except Exception:  # (the run directory unreadable) the interrupt itself still goes through
            raise e from None
        raise Interrupted(text) from e
    finally:
        _state["hint"] = None


def _exit_now() -> None:
    try:
        hint = f"; {_state['hint']()}" if _state["hint"] is not None else ""
    except Exception:  # exiting matters more than the hint
        hint = ""
    sys.stderr.write(f"tfamily: interrupted; clean-up did not finish within {GRACE_S:.0f} s, exiting{hint}\n")
    sys.stderr.flush()
    os._exit(130)


def _on_sigint(signum, frame) -> None:
    if _state["timer"] is not None:  # a second Ctrl-C: no more waiting
        _exit_now()
    _state["timer"] = timer = threading.Timer(GRACE_S, _exit_now)
    timer.daemon = True
    timer.start()
    if _state["deferring"]:
        _state["pending"] = True
        return
    raise KeyboardInterrupt


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def guard():
    """Install the SIGINT handler for the duration of a command (the main thread only)."""
    if not _main_thread() or signal.getsignal(signal.SIGINT) is _on_sigint:
        yield
        return
    before = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        if _state["timer"] is not None:
            _state["timer"].cancel()
        _state.update(timer=None, pending=False, deferring=False)


@contextlib.contextmanager
def deferred():
    """Hold a SIGINT until the block ends, then raise ``KeyboardInterrupt`` (outside any guard too)."""
    if not _main_thread() or _state["deferring"]:
        yield
        return
    with guard():
        _state["deferring"] = True
        try:
            yield
        finally:
            _state["deferring"] = False
            if _state["pending"]:
                _state["pending"] = False
                raise KeyboardInterrupt
