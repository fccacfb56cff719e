"""`tfamily ...`: the command-line tool.

Each command lives in its own module exposing ``add_parser(subparsers)``, which
sets ``func`` on its parser; this file only lists them and turns user errors
into one-line messages instead of tracebacks.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import json
import sys

# command -> (module defining add_parser(subparsers), its line in `tfamily --help`). Only the module
# of the command being run is imported: most of them import torch (seconds), which `tfamily --help`
# and `--version` do without. tests/test_cli.py keeps each line equal to the module's own help.
COMMANDS = {
    "members": ("tfamily.cli", "list the family members and their choices on each axis; with NAME, "
                               "a reading tour of that member"),
    "train": ("tfamily.train.cli", "train a member on a corpus or synthetic task (YAML/TOML config + key=value)"),
    "eval": ("tfamily.train.cli", "evaluate a checkpoint on held-out data"),
    "generate": ("tfamily.train.cli", "sample text from a checkpoint"),
    "demo": ("tfamily.train.cli", "train a small character GPT on Tiny Shakespeare (~5 min on 2 cores), "
                                  "print validation bpc and a sample"),
    "export": ("tfamily.export", "export a trained model as ONNX, TorchScript, a torch.export program "
                                 "(pt2) or a Hugging Face checkpoint (hf), checked against the eager model"),
    "compare": ("tfamily.compare", "final metrics of runs in one table and their curves in one figure"),
    "download": ("tfamily.data.cli", "download and verify a dataset (tinyshakespeare, enwik8, text8)"),
    "bench": ("tfamily.bench.cli", "benchmarks (speed and memory), printed and saved as JSON/CSV"),
    "plot": ("tfamily.bench.cli", "plots of trained models"),
    "repro": ("tfamily.repro.cli", "reproduce a paper's experiment"),
    "patterns": ("tfamily.bench.cli", "draw every attention pattern as a PNG"),
    "arena": ("tfamily.arena.cli", "members side by side on long-range classification tasks (ListOps, MNIST "
                                   "pixels, Pathfinder, text, document matching): one leaderboard"),
    "rl": ("tfamily.rl.cli", "reinforcement learning: PPO with memory torsos on gymnasium/POPGym"),
    "convert": ("tfamily.pretrained.cli", "import a local Hugging Face checkpoint (config.json + "
                                          "model.safetensors) as a tfamily run directory"),
}


class Parser(argparse.ArgumentParser):
    """A usage error (an unknown option, a value of the wrong type) in one line, exit status 2, as
    every other bad input; the full usage stays one `--help` away."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)}; see `{self.prog} --help`\n")


class UserError(Exception):
    """An error in what the user asked for; printed as one line, exit status 2."""


# OS errors about a path the user named (an unwritable or invalid --out, a file where a
# directory belongs, a full or read-only disk) are the user's to fix; any other OSError,
# and every other exception, is a bug and keeps its traceback.
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG,
                errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ELOOP}


def one_line(text: str) -> str:
    """A multi-line message (e.g. a list of searched paths) as one line."""
    out = ""
    for line in (ln.strip() for ln in str(text).splitlines()):
        if line:
            out += ("" if not out else " " if out.endswith(":") else "; ") + line
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


def add_parser(sub) -> None:
    p = sub.add_parser("members", help="list the family members and their choices on each axis; "
                                          "with NAME, a reading tour of that member")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="tour these members: per axis, the class implementing the choice and the paper's "
                        "equation or section (default: list all members)")
    p.add_argument("--json", action="store_true", help="print a JSON list (with NAME: each row has its tour)")
    p.set_defaults(func=_members)


def _members(args) -> int:
    from . import members, tour
    for name in args.names:
        members.get(name)  # an unknown name raises, listing the valid ones
    rows = [r for r in members.describe() if not args.names or r["name"] in args.names]
    if args.json:
        for r in rows if args.names else []:
            r["tour"] = [{"axis": s.axis, "choice": s.choice, "class": s.where, "citation": s.citation}
                         for s in tour.tour(r["name"])]
        print(json.dumps(rows, indent=2))
        return 0
    if args.names:
        print("\n\n".join(tour.render(r["name"]) for r in rows))
        return 0
    for r in rows:
        print(f"{r['name']:<20} {r['model']:<16} {r['paper']}")
        print("    " + ", ".join(f"{k}={v}" for k, v in r["choices"].items()))
    return 0


def make_parser(commands=None) -> argparse.ArgumentParser:
    """The CLI's parser with the full options of ``commands`` (default: all); any other command is
    listed by name and help line only, so its module (and torch) is not imported."""
    from . import __version__
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
    parser = make_parser([command] if command in COMMANDS else [])
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from .interrupt import guard
    try:
        with guard():  # Ctrl-C: out within seconds, whatever clean-up hangs (interrupt.py)
            return int(args.func(args) or 0)
    except (UserError, ValueError, TypeError, OSError, MemoryError) as e:
        message = user_error(e)
        if message is None or getattr(args, "debug", False):
            raise
        print(f"tfamily {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tfamily {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
