"""`tfamily ...`: the command-line tool.

Each command lives in its own module exposing ``add_parser(subparsers)``, which
sets ``func`` on its parser; this file only lists them and turns user errors
into one-line messages instead of tracebacks.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import re
import sys

from jsonargparse import ArgumentParser, DefaultHelpFormatter, Namespace

# command -> (module defining add_parser(subparsers), its line in `tfamily --help`). Only the module
# of the command being run is imported: most of them import torch (seconds), which `tfamily --help`
# and `--version` do without. tests/test_cli.py keeps each line equal to the module's own help.
COMMANDS = {
    "members": ("tfamily.members_cli", "list the family members and their choices on each axis; with NAME, "
                               "a reading tour of that member"),
    "train": ("tfamily.train.cli", "train a member on a corpus or synthetic task (YAML/TOML config + key=value)"),
    "eval": ("tfamily.train.cli", "evaluate a checkpoint on held-out data"),
    "generate": ("tfamily.train.cli", "sample text from a checkpoint"),
    "demo": ("tfamily.train.cli", "train a small character GPT on Tiny Shakespeare (~5 min on 2 cores), "
                                  "print validation bpc and a sample"),
    "export": ("tfamily.export_cli", "export a trained model as ONNX, TorchScript, a torch.export program "
                                 "(pt2) or a Hugging Face checkpoint (hf), checked against the eager model"),
    "compare": ("tfamily.compare", "final metrics of runs in one table and their curves in one figure"),
    "download": ("tfamily.data.cli", "download and verify a dataset (tinyshakespeare, enwik8, text8)"),
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


class _Commands:
    """argparse's ``add_subparsers()`` object on jsonargparse's subcommands, so every command module
    declares its options with the plain argparse calls (``sub.add_parser``, ``p.add_argument``)."""

    def __init__(self, parent: "Parser", dest: str, required: bool):
        self.parent, self.dest = parent, dest
        self.action = ArgumentParser.add_subcommands(parent, required=required, dest=dest)

    def add_parser(self, name: str, help: str | None = None, build=None, **kw) -> "Parser":
        """A subcommand's parser; with ``build(parser)``, its options are declared only when the
        subcommand is named on the command line (or every parser is wanted), so a command's module,
        and torch with it, is imported only when that command runs or shows its help."""
        prog = f"{self.parent.prog} {name}"
        parser = Parser(prog=prog, **kw)
        self.action.add_subcommand(name, parser, help=help)
        parser.prog = prog  # jsonargparse writes "tfamily [options] train"
        parser._build = build
        if _EAGER:
            parser.materialize()
        return parser


def _on_strings(convert):
    """``convert`` applied as argparse applies a ``type=``: to strings only (jsonargparse also
    passes it the converted value and the default when it validates), under the same name, so a
    bad value reads "argument --steps: invalid int value: 'x'". Plain int and float stay argparse's
    conversions: jsonargparse's type hints refuse nan and inf before the command can say why, and
    name the key rather than the option."""
    def on_strings(value):
        return convert(value) if isinstance(value, str) else value
    on_strings.__name__ = getattr(convert, "__name__", "value")
    return on_strings


_EAGER = False  # declare every subcommand's options at once (make_parser() with no command named)


class Help(DefaultHelpFormatter):
    """jsonargparse's help, with a default shown only where it says something (not null, false
    or an empty list, and not where the help already names it) and no type or "required"
    notes: a command's help reads as its authors wrote it."""

    def _get_help_string(self, action):
        if isinstance(action, argparse._HelpAction):
            return super()._get_help_string(action)
        text, default = action.help or "", action.default
        said = "default" in text or "%(default)" in text
        if action.option_strings and not said and default not in (None, False, argparse.SUPPRESS, [], ()):
            text += " (default: %(default)s)"
        return text



class Parser(ArgumentParser):
    """The CLI's parser: jsonargparse (nested subcommands; options declared as in argparse) with
    a usage error (an unknown option, a value of the wrong type) in one line, exit status 2, as
    every other bad input; the full usage stays one `--help` away."""

    _extra: dict = {}
    _commands: _Commands | None = None
    _build = None

    def materialize(self) -> None:
        """Declare the options of a lazily built subcommand (see _Commands.add_parser)."""
        build, self._build = self._build, None
        if build is not None:
            build(self)

    def __init__(self, *args, **kw):
        kw.setdefault("exit_on_error", True)
        kw.setdefault("allow_abbrev", False)  # an option is named in full (jsonargparse 5's default)
        kw.setdefault("formatter_class", Help)
        super().__init__(*args, **kw)

    def add_argument(self, *args, **kw):
        if callable(kw.get("type")):
            kw["type"] = _on_strings(kw["type"])
        return super().add_argument(*args, **kw)

    def parse_args(self, args=None, namespace=None, **kw):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_args(self._intermixed(args), namespace, **kw)

    def _intermixed(self, args: list[str]) -> list[str]:
        """``args`` with the innermost command's positionals moved after its options, so
        ``train -c tiny model.d_model=64 --steps 10 train.lr=1e-3`` parses: argparse (and
        jsonargparse) take a positional list only in one piece. An option given under its old and
        its new name (``--steps 3 --max-steps 5``) is refused here: argparse kept the last one."""
        if "--" in args:
            return args
        from .options import same_setting
        parser, i, moved, kept, given = self, 0, [], [], {}
        while i < len(args):
            token = args[i]
            if token.startswith("-") and len(token) > 1:
                name = token.split("=", 1)[0]
                action = parser._option_string_actions.get(name)
                if action is not None:
                    value = token.split("=", 1)[1] if "=" in token else " ".join(args[i + 1:i + 2])
                    for other, (old, old_value) in given.items():
                        if new := same_setting(action, other):
                            parser.error(f"{old} {old_value} and {name} {value} set the same thing (an old "
                                         f"name of {new} and {new} itself); give only {new}")
                    given[action] = (name, value)
                kept.append(token)
                i += 1
                if action is None or "=" in token:
                    continue
                nargs = action.nargs
                if isinstance(nargs, int):
                    kept.extend(args[i:i + nargs])
                    i += nargs
                elif nargs is None:
                    kept.extend(args[i:i + 1])
                    i += 1
                elif nargs in ("?", "*", "+"):
                    while i < len(args) and not args[i].startswith("-"):
                        kept.append(args[i])
                        i += 1
                        if nargs == "?":
                            break
                continue
            commands = parser._commands
            if commands is not None and not moved and token in commands.action._name_parser_map:
                kept.append(token)
                given = {}
                parser = commands.action._name_parser_map[token]
                parser.materialize()
            elif commands is not None and not moved and parser is not self and not any(
                    not a.option_strings for a in parser._actions if a is not commands.action):
                # a group such as `tfamily bench nosuch --help` printed its own help with exit 0
                names = ", ".join(commands.action._name_parser_map)
                parser.error(f"unknown command {token!r}; choose from {names}")
            else:
                moved.append(token)
            i += 1
        return kept + moved

    def error(self, message: str, ex: Exception | None = None):
        prog, message = self._named(one_line(message))
        self.exit(2, f"{prog}: error: {message}; see `{prog} --help`\n")

    def _named(self, message: str) -> tuple[str, str]:
        """jsonargparse names a missing argument of a subcommand by its dotted key from the top
        ("required: eval.checkpoint"); say it as argparse did, from the subcommand: "tfamily eval:
        ... required: DIR"."""
        m = re.fullmatch(r"the following arguments are required: ([\w.]+(?:, [\w.]+)*)", message)
        if not m:
            return self.prog, message
        prog, names = self.prog, []
        for key in m.group(1).split(", "):
            parser, *path = self, *key.split(".")
            while len(path) > 1 and parser._commands and path[0] in parser._commands.action._name_parser_map:
                parser = parser._commands.action._name_parser_map[path.pop(0)]
            action = next((a for a in parser._actions if a.dest == ".".join(path)), None)
            prog = parser.prog
            names.append(key if action is None else "/".join(action.option_strings) or action.metavar
                         or action.dest)
        return prog, f"the following arguments are required: {', '.join(names)}"

    def set_defaults(self, *args, **kw):
        # jsonargparse keeps defaults only for declared options; what a command attaches to its
        # parser (``func``: the function that runs it) is kept here and merged by flatten().
        known = {a.dest for a in self._actions}
        self._extra = {**self._extra, **{k: kw.pop(k) for k in list(kw) if k not in known}}
        if args or kw:
            super().set_defaults(*args, **kw)

    def add_subparsers(self, dest: str | None = None, metavar: str | None = None, required: bool = False,
                       **kw) -> _Commands:
        self._commands = _Commands(self, dest or "subcommand", required)
        return self._commands

    def parse(self, args=None) -> argparse.Namespace:
        """``args`` parsed into the flat namespace every command reads (see flatten)."""
        return self.flatten(self.parse_args(args))

    def flatten(self, cfg) -> argparse.Namespace:
        """jsonargparse's nested result (``cfg.train.steps``) as the flat namespace each command
        reads (``args.steps``), with ``command``, the inner command's dest and ``func`` set."""
        out = argparse.Namespace()
        parser = self
        while True:
            for key, value in vars(cfg).items():
                if not isinstance(value, Namespace):
                    setattr(out, key, value)
            for key, value in parser._extra.items():
                setattr(out, key, value)
            commands = parser._commands
            name = getattr(cfg, commands.dest, None) if commands else None
            if not name:
                return out
            parser, cfg = commands.action._name_parser_map[name], getattr(cfg, name)



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


def make_parser(commands=None) -> argparse.ArgumentParser:
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
    args = parser.parse(argv)
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
    except KeyboardInterrupt as e:
        from .interrupt import Interrupted
        hint = f"; {e}" if isinstance(e, Interrupted) else ""
        print(f"tfamily {args.command}: interrupted{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
