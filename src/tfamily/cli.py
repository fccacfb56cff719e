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

# command name -> module defining add_parser(subparsers). Imported lazily so
# `tfamily members` does not pay for matplotlib or tensorboard.
COMMANDS = {
    "members": "tfamily.cli",
    "train": "tfamily.train.cli",
    "eval": "tfamily.train.cli",
    "generate": "tfamily.train.cli",
    "demo": "tfamily.train.cli",
    "compare": "tfamily.compare",
    "download": "tfamily.data.cli",
    "bench": "tfamily.bench.cli",
    "patterns": "tfamily.bench.cli",
    "plot": "tfamily.bench.cli",
    "repro": "tfamily.bench.cli",
    "rl": "tfamily.rl.cli",
}


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


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfamily", description="The Transformer family: train, compare, reuse.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen = set()
    for module in dict.fromkeys(COMMANDS.values()):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:  # a command module not written yet
            if e.name and e.name.startswith("tfamily"):
                continue
            raise
        if module not in seen:
            mod.add_parser(sub)
            seen.add(module)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
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
