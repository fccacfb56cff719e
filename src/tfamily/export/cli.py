"""`tfamily export RUN --format onnx|torchscript|pt2|hf --out PATH`: the formats live in ``graphs.py`` and
``hf.py``, imported only when the command runs, so that `tfamily export --help` does not import torch."""
from __future__ import annotations

import json

from ..settings.commands import FORMAT_NAMES, Export
from ..settings.schema import add_flags


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="export a trained model as ONNX, TorchScript, a torch.export program "
                                      "(pt2) or a Hugging Face checkpoint (hf), checked against the eager model")
    add_flags(p, Export)
    p.set_defaults(func=_export)


def _export(args) -> int:
    from .graphs import check_format, check_out, export, refusal
    from ..train.sample import load_trained
    if args.format == "hf":
        return _export_hf(args)
    fmt = check_format(args.format)
    check_out(args.out, fmt, args.force)  # before the checkpoint is read: a bad path fails fast
    tr = load_trained(args.run, "cpu")
    reason = refusal(tr.spec, fmt)
    if reason:
        raise ValueError(reason)
    result = export(tr.model, fmt, args.out, tr.seq_len, args.force)
    result["checkpoint"] = str(tr.path)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"exported {result['member']} ({tr.path.name}) as {fmt} to {result['path']} "
          f"({result['bytes'] / 1e6:.1f} MB); inputs {', '.join(result['inputs'])}; {result['dynamic']}; "
          f"max |logit - eager| {result['max_abs_diff']:.2g}")
    for note in result["notes"]:
        print(f"  note: {note}")
    return 0


def _export_hf(args) -> int:
    from .hf import check_out, export_hf, hf_config
    from ..train.sample import load_trained
    check_out(args.out, args.force)  # before the checkpoint is read: a bad path fails fast
    tr = load_trained(args.run, "cpu")
    source = tr.path / "meta.json"  # where the spec was read: a refusal names it
    hf_config(tr.spec, source)
    result = export_hf(tr.model, args.out, tr.vocab, args.force, source)
    result["checkpoint"] = str(tr.path)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"exported {result['member']} ({tr.path.name}) as a Hugging Face {result['model_type']} checkpoint to "
          f"{result['path']} ({', '.join(result['files'])}); max |logit - eager| {result['max_abs_diff']:.2g}")
    if "tokenizer.json" not in result["files"]:
        print("  note: the run's vocabulary is not a tokenizer.json (character or byte); transformers loads the "
              "model, a tokenizer must come from elsewhere")
    return 0
