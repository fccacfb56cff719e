"""`tfamily ...`: the command-line tool.

Each command lives in its own module exposing ``add_parser(subparsers)``, which
sets ``func`` on its parser; this file only lists them and turns user errors
into one-line messages instead of tracebacks.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import sys

from .settings.schema import with_default

# command -> (module defining add_parser(subparsers), its line in `tfamily --help`). Only the module
# of the command being run is imported: most of them import torch (seconds), which `tfamily --help`
# and `--version` do without. tests/test_cli.py keeps each line equal to the module's own help.
COMMANDS = {
    "members": ("tfamily.catalogue.cli", "list the family members and their choices on each axis; with NAME, "
                               "a reading tour of that member"),
    "train": ("tfamily.train.cli", "train a member on a corpus or synthetic task (YAML/TOML config + key=value)"),
    "eval": ("tfamily.train.cli", "evaluate a checkpoint on held-out data"),
    "generate": ("tfamily.train.cli", "sample text from a checkpoint"),
    "predict": ("tfamily.train.predict_cli", "label texts with a trained classifier: each text's label and "
                                             "probabilities (--json for JSON)"),
    "demo": ("tfamily.train.cli", "train a small character GPT on Tiny Shakespeare (~5 min on 2 cores), "
                                  "print validation bpc and a sample"),
    "export": ("tfamily.export.cli", "export a trained model as ONNX, TorchScript, a torch.export program "
                                 "(pt2) or a Hugging Face checkpoint (hf), checked against the eager model"),
    "compare": ("tfamily.compare", "final metrics of runs in one table and their curves in one figure"),
    "download": ("tfamily.data.cli", "download and verify a dataset (tinyshakespeare, enwik8, text8)"),
    "data": ("tfamily.data.cli", "prepare your own text as memory-mapped token shards (data.corpus=DIR), "
                                 "or verify a prepared folder"),
    "bench": ("tfamily.bench.cli", "benchmarks (speed and memory), printed and saved as JSON/CSV"),
    "calibrate": ("tfamily.train.calibrate", "measure this machine's default training threads and precision again"),
    "plot": ("tfamily.bench.cli", "plots of trained models"),
    "repro": ("tfamily.repro.cli", "reproduce a paper's experiment"),
    "patterns": ("tfamily.bench.cli", "draw every attention pattern as a PNG"),
    "arena": ("tfamily.arena.cli", "members side by side on long-range tasks (ListOps, MNIST pixels, Pathfinder, "
                                   "text, document matching, byte-level language modelling): one leaderboard"),
    "rl": ("tfamily.rl.cli", "reinforcement learning: PPO with memory torsos on gymnasium/POPGym"),
    "convert": ("tfamily.pretrained.cli", "import a local Hugging Face checkpoint (config.json + "
                                          "model.safetensors) as a tfamily run directory"),
}


class Parser(argparse.ArgumentParser):
    """argparse with what the CLI needs beside it: a usage error (an unknown option, a value of the
    wrong type) in one line, exit status 2, as every other bad input; options named in full; a
    ``KEY=VALUE`` list intermixed with the options (``train -c tiny model.d_model=64 --steps 10
    train.lr=1e-3``: argparse's own ``parse_intermixed_args``); a subcommand's options declared
    only when it is named (``build``), so `tfamily bench --help` imports no benchmark; an option
    given under its old and its new name refused (argparse kept the last one)."""

    def __init__(self, *args, build=None, **kw):
        kw.setdefault("allow_abbrev", False)  # an option is named in full
        kw.setdefault("exit_on_error", False)  # parse_known_args turns its ArgumentError into one line
        self.flags: dict[str, argparse.Action] = {}   # option string -> its action
        self.old_names: dict[str, str] = {}           # old option string -> its new name (options.renamed)
        self.commands = None                          # the subcommands' action, if any
        self.mixed = False                            # a positional list intermixes with the options
        self._build = build
        super().__init__(*args, **kw)
        if _EAGER:
            self.materialize()

    def materialize(self) -> None:
        """Declare the options of a lazily built subcommand."""
        build, self._build = self._build, None
        if build is not None:
            build(self)

    def add_argument(self, *args, **kw):
        if args and args[0].startswith("-") and kw.get("help") != argparse.SUPPRESS:
            kw["help"] = with_default(kw.get("help") or "", kw.get("default"))
        action = super().add_argument(*args, **kw)
        self.flags.update(dict.fromkeys(action.option_strings, action))
        self.mixed = self.mixed or (not action.option_strings and action.nargs in ("*", "+"))
        return action

    def add_subparsers(self, **kw):
        self.commands = super().add_subparsers(**kw)
        return self.commands

    def parse_known_args(self, args=None, namespace=None):
        self.materialize()
        args = sys.argv[1:] if args is None else list(args)
        self._one_name_each(args)
        try:
            if not self.mixed or self.commands is not None:
                return super().parse_known_args(args, namespace)
            self.mixed = False  # parse_known_intermixed_args calls parse_known_args twice
            try:
                parsed, extra = self.parse_known_intermixed_args(args, namespace)
            finally:
                self.mixed = True
        except argparse.ArgumentError as e:
            if self.commands is not None and e.argument_name == self.commands.metavar:
                # argparse: "argument COMMAND: invalid choice: 'nosuch' (choose from 'a', 'b')"
                self.error(f"unknown command {self._command(args)!r}; choose from {', '.join(self.commands.choices)}")
            self.error(str(e))
        if extra:  # a leaf: nothing after it could take them
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra

    def _command(self, args: list[str]) -> str:
        """The token argparse took for a subcommand: the first not an option or an option's value."""
        takes = 0
        for token in args:
            if token.startswith("-"):
                action = self.flags.get(token.partition("=")[0])
                takes = 0 if action is None or "=" in token else len(args) if action.nargs in ("+", "*") else \
                    action.nargs if isinstance(action.nargs, int) else int(action.nargs in (None, "?"))
            elif takes:
                takes -= 1
            else:
                return token
        return ""

    parse = argparse.ArgumentParser.parse_args

    def _one_name_each(self, args: list[str]) -> None:
        seen = {}
        for i, token in enumerate(args):
            if token == "--":
                return
            name, eq, value = token.partition("=")
            new = self.old_names.get(name, name if name in self.old_names.values() else None)
            if new is None:
                continue
            value = value if eq else " ".join(args[i + 1:i + 2])
            if new in seen and seen[new][0] != name:
                old, old_value = seen[new]
                self.error(f"{old} {old_value} and {name} {value} set the same thing (an old name of {new} and "
                           f"{new} itself); give only {new}")
            seen[new] = (name, value)

    def error(self, message: str):
        prog = self.prog
        self.exit(2, f"{prog}: error: {one_line(message)}; see `{prog} --help`\n")


_EAGER = False  # declare every subcommand's options at once (make_parser() with no command named)


class UserError(Exception):
    """An error in what the user asked for; printed as one line, exit status 2."""


# OS errors about a path the user named (an unwritable or invalid --out, a file where a
# directory belongs, a full or read-only disk) are the user's to fix; any other OSError,
# and every other exception, is a bug and keeps its traceback.
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG,
                errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ELOOP}


MAX_LINE = 2000  # an error line quoting a huge value (most are cut where raised) stays readable


def one_line(text: str) -> str:
    """A multi-line message (e.g. a list of searched paths) as one line, cut to ``MAX_LINE``."""
    out = ""
    for line in (ln.strip() for ln in str(text).splitlines()):
        if line:
            out += ("" if not out else " " if out.endswith(":") else "; ") + line
    if len(out) > MAX_LINE:
        out = f"{out[:MAX_LINE - 500]} ...[{len(out) - MAX_LINE + 100} characters cut]... {out[-400:]}"
    return out


def user_error(e: BaseException) -> str | None:
    """The one-line message for ``e`` if it is a user error, else None (a bug: re-raise)."""
    if isinstance(e, (UserError, ValueError, TypeError, FileNotFoundError)):
        return one_line(str(e))
    path_kind = (PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
    if isinstance(e, path_kind) or isinstance(e, OSError) and e.errno in _PATH_ERRNOS:
        if e.errno is None:  # raised by tfamily with its own message
            return one_line(str(e))
        where = (f": {e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")) if e.filename else ""
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"{e.strerror}{where}; free space there or pick another directory"
        return f"{e.strerror}{where}; check the path and its permissions, or pick another"
    if isinstance(e, MemoryError):
        return f"out of memory ({e or 'allocation failed'}); use a smaller model, batch or sequence length"
    return None


def make_parser(commands=None) -> Parser:
    """The CLI's parser with the full options of ``commands`` (default: all); any other command is
    listed by name and help line only, so its module (and torch) is not imported."""
    global _EAGER
    from . import __version__
    _EAGER = commands is None
    parser = Parser(prog="tfamily", description="The Transformer family: train, compare, reuse.")
    parser.add_argument("--version", action="version", version=f"tfamily {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = set(COMMANDS if commands is None else commands)
    modules = dict.fromkeys(module for module, _ in COMMANDS.values())
    for module in modules:
        names = [name for name, (m, _) in COMMANDS.items() if m == module]
        if wanted.isdisjoint(names):
            for name in names:
                sub.add_parser(name, help=COMMANDS[name][1])
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:  # a command module not written yet
            if e.name and e.name.startswith("tfamily"):
                continue
            raise
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in COMMANDS:
        # argparse would print the top help and exit 0 for `tfamily nosuch --help`
        import difflib
        near = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f"did you mean `tfamily {near[0]}`? " if near else ""
        print(f"tfamily: error: unknown command {command!r}; {hint}the commands are {', '.join(COMMANDS)} "
              f"(see `tfamily --help`)", file=sys.stderr)
        return 2
    parser = make_parser([command] if command in COMMANDS else [])
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from .base.interrupt import guard
    from .settings.schema import check_args
    try:
        check_args(args)
        with guard():  # Ctrl-C: out within seconds, whatever clean-up hangs (base/interrupt.py)
            return int(args.func(args) or 0)
    except (UserError, ValueError, TypeError, OSError, MemoryError) as e:
        message = user_error(e)
        if message is None or getattr(args, "debug", False):
            raise
        print(f"tfamily {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        from .base.interrupt import Interrupted
        hint = f"; {e}" if isinstance(e, Interrupted) else ""
        print(f"tfamily {args.command}: interrupted{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
