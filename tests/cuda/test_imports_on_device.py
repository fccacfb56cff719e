"""``make test-cuda`` runs on a GPU image that may lack gymnasium, popgym and tensorboard, from the
source tree with no compiled CPU extension: this folder collects, and two training runs (fp32, fp16) pass,
in a fresh interpreter where those packages cannot be imported and the extension is off."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("gymnasium", "popgym", "tensorboard")
# None in sys.modules makes `import name` raise ImportError, as on an image without it.
CODE = f"""
import sys
sys.modules.update(dict.fromkeys({BLOCKED!r}))
import pytest
rc = pytest.main(["-q", "-p", "no:cacheprovider", "tests/cuda", "-k", "resumed_run and gpt"])
try:
    import tfamily.rl.envs
except ImportError:
    print("gymnasium is blocked")
sys.exit(rc)
"""


def test_the_folder_runs_without_optional_packages_or_the_compiled_extension(tmp_path):
    env = dict(os.environ, PYTHONPATH="src", TFAMILY_NATIVE="0", TFAMILY_CACHE=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout and "gymnasium is blocked" in proc.stdout, proc.stdout[-2000:]
