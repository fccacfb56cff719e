"""``tfamily`` with the tests' hooks installed as training callbacks, for the tests that start a run in
a subprocess and kill it, interrupt it or race another against it at a chosen point:

    python tests/hooked_cli.py [--halt KIND:STEP FLAG] [--pause STAGE DIR] [--saves FILE] -- train ...
    python tests/hooked_cli.py [...] -- SCRIPT.py ARGS...     (a script that makes its own Trainer)

``--halt step:N FLAG``: after step N (its evaluation and checkpoint done) create FLAG and wait to be
killed; ``--halt checkpoint:N FLAG``: the same inside the write of checkpoint N, its tensors written and
``meta.json`` not yet. ``--pause STAGE DIR``: on reaching the start-up STAGE (``args``: before the command
reads its arguments; then ``callbacks.STAGES``) create DIR/STAGE and wait until DIR/go exists (at most
120 s). ``--saves FILE``: append each checkpoint write's step to FILE as it begins.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from pathlib import Path


def hooked(*hooks: str) -> list[str]:
    """The command line that runs ``tfamily`` here with ``hooks`` (this module's options) installed;
    append the command's own arguments."""
    return [sys.executable, str(Path(__file__).resolve()), *hooks, "--"]


def _wait_to_be_killed(flag: Path) -> None:
    flag.write_text(str(os.getpid()))
    time.sleep(120)
    os._exit(99)  # never reached when the test kills us


class Halt:
    """``on_step`` / ``on_save`` at ``kind:step``: announce by ``flag`` and wait for the SIGKILL."""

    def __init__(self, at: str, flag: Path):
        kind, _, step = at.partition(":")
        if kind not in ("step", "checkpoint"):
            raise ValueError(f"--halt {at}: the kinds are step and checkpoint")
        self.kind, self.step, self.flag = kind, int(step), flag

    def on_step(self, rec) -> None:
        if self.kind == "step" and rec.step == self.step:
            _wait_to_be_killed(self.flag)

    def on_save(self, step: int, phase: str) -> None:
        if self.kind == "checkpoint" and step == self.step and phase == "files":
            _wait_to_be_killed(self.flag)


class Pause:
    """``on_stage``: at ``stage`` (once) create ``folder/stage`` and wait for ``folder/go``."""

    def __init__(self, stage: str, folder: Path):
        self.stage, self.folder, self.done = stage, folder, False

    def on_stage(self, stage: str) -> None:
        if stage != self.stage or self.done:
            return
        self.done = True
        (self.folder / stage).write_text(str(os.getpid()))
        deadline = time.monotonic() + 120
        while not (self.folder / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)


class Saves:
    """``on_save``: each checkpoint write's step, appended to ``path`` as it begins."""

    def __init__(self, path: Path):
        self.path = path

    def on_save(self, step: int, phase: str) -> None:
        if phase == "begin":
            with open(self.path, "a") as f:
                f.write(f"{step}\n")


def main(argv: list[str]) -> int:
    split = argv.index("--")
    p = argparse.ArgumentParser(prog="hooked_cli.py")
    p.add_argument("--halt", nargs=2, metavar=("KIND:STEP", "FLAG"))
    p.add_argument("--pause", nargs=2, metavar=("STAGE", "DIR"))
    p.add_argument("--saves", metavar="FILE")
    args = p.parse_args(argv[:split])
    from tfamily import cli
    from tfamily.train.callbacks import installed
    pause = Pause(args.pause[0], Path(args.pause[1])) if args.pause else None
    hooks = [*([Halt(args.halt[0], Path(args.halt[1]))] if args.halt else []), *([pause] if pause else []),
             *([Saves(Path(args.saves))] if args.saves else [])]
    if pause is not None:
        pause.on_stage("args")  # before the command: it is no training stage
    rest = argv[split + 1:]
    with installed(*hooks):
        if rest and rest[0].endswith(".py"):
            sys.argv = rest
            runpy.run_path(rest[0], run_name="__main__")
            return 0
        return cli.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
