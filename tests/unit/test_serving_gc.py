"""The functions-framework targets' module leaves what start-up loaded out of the garbage
collector's way (gc.freeze): a full collection walks only what deliveries made since."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_what_start_up_loaded_is_frozen(tmp_path: Path) -> None:
    code = "import gc, modelhooks.main; print(gc.get_freeze_count())"
    env = {**os.environ, "FUNCTION_TARGET": "register", "MODELHOOKS_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) > 10_000  # the modules, Flask's, ours: not walked again
