"""`tfamily predict RUN --text T... | --file F`: a trained classifier's label and probabilities per text.

    tfamily predict runs/reviews --text "a fine film" "dull"
    tfamily predict runs/reviews --file new_reviews.txt --json

``--file``: a text file holds one text per line (empty lines skipped); a CSV or JSONL file, the
``text`` field of each row (a label column, if any, is ignored). The texts run ``--batch-size`` at a
time; ``--json`` prints one object with each text's label and the probability of every label.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..settings import commands
from ..settings.schema import add_flags

HELP = "label texts with a trained classifier: each text's label and probabilities (--json for JSON)"
TEXTS_BYTES = 1 << 30  # a --file is read whole


def add_parser(sub) -> None:
    p = sub.add_parser("predict", help=HELP, description=__doc__.split("\n\n")[0])
    add_flags(p, commands.Predict)
    p.set_defaults(func=_predict)


def read_texts(path: str) -> list[str]:
    """The texts of ``--file``: one per line, or the ``text`` field of a CSV's or JSONL's rows."""
    from ..base.textload import read_csv, read_jsonl, read_text
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"--file {path} " + ("is not a regular file" if p.exists() else "does not exist")
                                + "; pass a text file (one text per line) or a CSV/JSONL with a text column")
    suffix = p.suffix.lower()
    if suffix in (".csv", ".jsonl"):
        rows = read_csv(p, TEXTS_BYTES) if suffix == ".csv" else read_jsonl(p, TEXTS_BYTES)
        for i, r in enumerate(rows, 2 if suffix == ".csv" else 1):
            if not isinstance(r, dict) or not isinstance(r.get("text"), str):
                raise ValueError(f"--file {path} row {i} has no text ({str(r)[:80]}); every row needs one (a CSV "
                                 f"header with 'text', JSONL field text)")
        texts = [r["text"] for r in rows]
    else:
        texts = [line for line in read_text(p, TEXTS_BYTES).splitlines() if line.strip()]
    if not texts:
        raise ValueError(f"--file {path} holds no texts; write one text per line (or CSV/JSONL rows with a text)")
    return texts


def _predict(args) -> int:
    if (args.text is None) == (args.file is None):
        raise ValueError("give the texts with --text T... or --file F (one of them); e.g. "
                         "`tfamily predict RUN --text \"a fine film\"`")
    texts = args.text if args.text is not None else read_texts(args.file)
    from .predict import check_classifier, load, predict
    run = load(args.checkpoint, args.device)
    check_classifier(run)
    preds = predict(run, texts, batch_size=args.batch_size, threads=args.threads)
    if args.json:
        print(json.dumps({"checkpoint": str(run.path), "labels": list(run.labels),
                          "predictions": [{"text": t, "label": p.label, "probs": p.probs}
                                          for t, p in zip(texts, preds)]}))
        return 0
    width = max(map(len, run.labels))
    for t, p in zip(texts, preds):
        text = t if len(t) <= 70 else t[:67] + "..."
        print(f"{p.label:<{width}}  {p.probs[p.label]:.3f}  {text!r}")
    return 0
