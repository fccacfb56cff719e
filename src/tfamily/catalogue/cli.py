"""`tfamily members`: the family listed, a member's reading tour (``catalogue/tour.py``), and the fields in which
two members differ (``family.diff``)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..base.numbers import cut
from ..settings.schema import add_flags, setting


@dataclass
class Settings:
    """`tfamily members [NAME...]`."""
    names: list[str] = setting([], positional="NAME", help="tour these members: per axis, the class implementing "
                               "the choice and the paper's equation or section (default: list all members)")
    json: bool = setting(False, flag=True, help="print a JSON list (with NAME: each row has its tour)")
    diff: str | None = setting(None, flag=True, metavar="OTHER", help="with one NAME: the spec fields in which NAME "
                               "and OTHER differ, and the paper behind each")


def add_parser(sub) -> None:
    p = sub.add_parser("members", help="list the family members and their choices on each axis; "
                                          "with NAME, a reading tour of that member")
    add_flags(p, Settings)
    p.set_defaults(func=_members)


def _members(args) -> int:
    from .. import members
    from . import tour
    for name in args.names:
        members.get(name)  # an unknown name raises, listing the valid ones
    if args.diff is not None:
        return _members_diff(args)
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
    # widths from the rows themselves: a fixed width let long names push their row out of line
    wn, wm = (max(len(r[k]) for r in rows) for k in ("name", "model"))
    for r in rows:
        print(f"{r['name']:<{wn}}  {r['model']:<{wm}}  {r['paper']}")
        print("    " + ", ".join(f"{k}={v}" for k, v in r["choices"].items()))
    return 0


def _members_diff(args) -> int:
    from .. import members
    if len(args.names) != 1:
        raise ValueError(f"--diff {args.diff} compares one member with another; give one NAME, got "
                         f"{len(args.names)} (e.g. tfamily members gpt --diff longformer)")
    a, b = args.names[0], args.diff
    members.get(b)
    rows = members.diff(a, b)
    if args.json:
        print(json.dumps([{"key": k, a: va, b: vb, "source": src} for k, va, vb, src in rows], indent=2))
        return 0
    print(f"{a} and {b} differ in {len(rows)} spec fields" + (":" if rows else ""))
    width = max((len(k) for k, *_ in rows), default=0)
    last = None
    for key, va, vb, src in rows:
        print(f"  {key:<{width}}  {cut(va, 60)} | {cut(vb, 60)}")
        if src and src != last:  # one change often sets several fields
            print(f"  {'':<{width}}    {src}")
        last = src
    return 0
