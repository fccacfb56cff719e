"""The result: ``result.json`` in the run directory (rank 0), what ``Trainer.fit`` returns."""
from __future__ import annotations

import json
from pathlib import Path


class ResultFile:
    def __init__(self, run_dir: Path | None):
        """``run_dir``: where to write (None: another rank than 0 writes nothing)."""
        self.run_dir = run_dir

    def on_result(self, result: dict) -> None:
        if self.run_dir is not None:
            (self.run_dir / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
