"""The functions-framework targets' module leaves what start-up loaded out of the garbage
collector's way (gc.freeze): a full collection walks only what deliveries made since."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, home: Path, **env: str) -> list[str]:
    environ = {**os.environ, "FUNCTION_TARGET": "register", "MODELHOOKS_HOME": str(home), **env}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_what_start_up_loaded_is_frozen_and_the_collector_runs_again(tmp_path: Path) -> None:
    """The collector is off while the module loads (its passes over start-up's objects cost
    2-3 ms of a cold start), and on again once they are frozen."""
    code = "import gc, modelhooks.main; print(gc.get_freeze_count(), gc.isenabled())"
    frozen, enabled = _run(code, tmp_path)
    assert int(frozen) > 10_000  # the modules, Flask's, ours: not walked again
    assert enabled == "True"


def test_a_start_up_refused_for_a_bad_setting_leaves_the_collector_on(tmp_path: Path) -> None:
    code = (
        "import gc\n"
        "try:\n    import modelhooks.main\n"
        "except Exception as exc:\n    print(type(exc).__name__, gc.isenabled())"
    )
    refused, enabled = _run(code, tmp_path, MODELHOOKS_REGISTRY_BACKEND="nowhere")
    assert refused == "ConfigError" and enabled == "True"
